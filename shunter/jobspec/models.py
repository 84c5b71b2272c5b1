"""The JobSpec (v1) schema: fields, defaults, enums and per-field bounds.

Exactly DESIGN.md's "JobSpec (v1)". Every object forbids unknown keys; every number is
bounded (the bounds are in each field's description, so they show in OpenAPI). Rules that
involve more than one field live in ``shunter.jobspec.rules``; path resolution in
``service.jobs.paths``. Decisions DESIGN.md left open, written down here:

- ``name``, ``model.task``, ``model`` and ``data.train`` are required; everything else has
  the default DESIGN.md shows.
- ``data.*.format`` may be omitted and is then inferred from the file suffix
  (``.csv``/``.tsv`` → csv with ``,``/tab delimiter, ``.json``, ``.jsonl``, ``.txt`` → text,
  ``.parquet``); the resolved spec always has it.
- ``eval_strategy``/``save_strategy`` accept YAML's ``no`` → ``false`` as ``"no"``.
- Types are strict: a number field takes a JSON/YAML number (an integer field an integer),
  a boolean field ``true``/``false``; ``"8"``, ``true`` for a count, ``8.0`` for an integer are
  422s naming the type expected. ``shunter.jobspec.parse`` reads YAML numbers as YAML does
  (plus ``5e-5``, a float in YAML 1.2). NaN and infinities are rejected everywhere.
- Every field has a ``description``: the JSON schema (``shunter.jobspec.schema``, served at
  ``GET /v1/jobspec.schema.json``, committed as ``docs/jobspec.schema.json``) and
  ``docs/jobspec-reference.md`` are generated from it (``scripts/gen_jobspec_docs.py``).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    JsonValue,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from shunter.jobspec.vocab import Priority, WebhookEventType

__all__ = [
    "DATA_FORMATS",
    "DEEPSPEED_STAGES",
    "DTYPES",
    "FSDP_SHARDINGS",
    "GALORE_OPTIMIZERS",
    "HUB_ID_RE",
    "LR_SCHEDULERS",
    "OBJECT_ID_RE",
    "OPTIMIZERS",
    "STRATEGIES",
    "TASKS",
    "TP_STRATEGIES",
    "DataFormat",
    "DataSource",
    "DataSpec",
    "DeepSpeedSpec",
    "DeepSpeedStage",
    "DistributedSpec",
    "DivergenceSpec",
    "Dtype",
    "FsdpMixedPrecision",
    "FsdpSharding",
    "FsdpSpec",
    "HangSpec",
    "HealthSpec",
    "InitFromSpec",
    "JobSpec",
    "LoraSpec",
    "LrScheduler",
    "ModelSpec",
    "NotifySpec",
    "OptimArgs",
    "Optimizer",
    "QuantizationSpec",
    "ResourcesSpec",
    "SchedulingSpec",
    "StragglerSpec",
    "Strategy",
    "Task",
    "TrainingSpec",
    "is_store_ref",
]

Task = Literal[
    "causal-lm",
    "sequence-classification",
    "token-classification",
    "masked-lm",
    "chat-sft",
    "seq2seq",
    "regression",
    "multi-label-classification",
    "question-answering",
]
TASKS: tuple[str, ...] = get_args(Task)
# save_to_disk: a folder written by datasets' Dataset.save_to_disk (never inferred: give it).
DataFormat = Literal["csv", "json", "jsonl", "text", "parquet", "save_to_disk"]
DATA_FORMATS: tuple[str, ...] = get_args(DataFormat)
Dtype = Literal["float32", "bfloat16", "float16"]
DTYPES: tuple[str, ...] = get_args(Dtype)
# Hugging Face's OptimizerNames: bitsandbytes (adamw_8bit, paged_adamw_8bit), torchao's
# low-bit AdamW (adamw_torch_8bit / _4bit), GaLore (trainer_core.galore).
Optimizer = Literal[
    "adamw_torch",
    "adamw_torch_fused",
    "adafactor",
    "sgd",
    "lion",
    "adamw_8bit",
    "paged_adamw_8bit",
    "adamw_torch_8bit",
    "adamw_torch_4bit",
    "galore_adamw",
    "galore_adamw_8bit",
    "galore_adafactor",
]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
GALORE_OPTIMIZERS: frozenset[str] = frozenset(o for o in OPTIMIZERS if o.startswith("galore_"))
LrScheduler = Literal[
    "linear",
    "cosine",
    "constant",
    "constant_with_warmup",
    "polynomial",
    "cosine_with_restarts",
    "reduce_lr_on_plateau",
]
LR_SCHEDULERS: tuple[str, ...] = get_args(LrScheduler)
Interval = Literal["no", "steps", "epoch"]
Strategy = Literal["ddp", "fsdp", "deepspeed", "tp", "fsdp+tp"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
TP_STRATEGIES: frozenset[str] = frozenset({"tp", "fsdp+tp"})
PipelineSchedule = Literal["gpipe", "1f1b"]
FsdpSharding = Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"]
FSDP_SHARDINGS: tuple[str, ...] = get_args(FsdpSharding)
FsdpMixedPrecision = Literal["autocast", "params"]
DeepSpeedStage = Literal[0, 1, 2, 3]
DEEPSPEED_STAGES: tuple[int, ...] = get_args(DeepSpeedStage)

# A Hugging Face hub id: `name` or `org/name`; each part starts alphanumeric.
HUB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
# A team object in the store (issue #28): ``ds-...`` a dataset, ``mdl-...`` a base model;
# ``s3://bucket/...`` a bucket the server may read for the team. Never a path or a hub id.
OBJECT_ID_RE = re.compile(r"(ds|mdl)-[0-9a-z]{8,36}")
_S3_URI_RE = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s?#]*)?")


def is_store_ref(value: str | None) -> bool:
    """True for a value that names a team object (``ds-``/``mdl-``) or an ``s3://`` URI."""
    return value is not None and bool(OBJECT_ID_RE.fullmatch(value) or _S3_URI_RE.fullmatch(value))


_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_MAX_STEPS = 1_000_000_000  # upper bound for every step count (≈ 30 years at 1 step/s)
_SUFFIX_FORMATS: dict[str, tuple[str, str | None]] = {
    ".csv": ("csv", ","),
    ".tsv": ("csv", "\t"),
    ".json": ("json", None),
    ".jsonl": ("jsonl", None),
    ".txt": ("text", None),
    ".parquet": ("parquet", None),
}


def _printable(value: str) -> str:
    # Paths and names end up in os calls, logs and PostgreSQL text: no control characters
    # (NUL in particular). Lone surrogates never get here: pydantic's str rejects them.
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not contain control characters")
    return value


PathOrHub = Annotated[
    str, StringConstraints(min_length=1, max_length=4096), AfterValidator(_printable)
]
Ident = Annotated[str, StringConstraints(min_length=1, max_length=256), AfterValidator(_printable)]
Steps = Annotated[int, Field(ge=1, le=_MAX_STEPS)]


def _not_bool(value: Any) -> Any:
    # A Literal of ints takes True as 1 (True == 1 in Python); `stage: true` is not stage 1.
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got the boolean {str(value).lower()}")
    return value


BatchSize = Annotated[int, Field(ge=1, le=65536, description="1..65536")]


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, str_max_length=4096
    )


class LoraSpec(_Spec):
    """PEFT LoRA adapters (``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules``).

    ``merge_on_save`` (beyond DESIGN.md; trainer_core supports it) writes merged full
    weights as the final model instead of a separate adapter.
    """

    r: int = Field(8, ge=1, le=4096, description="adapter rank, 1..4096")
    alpha: int = Field(16, ge=1, le=65536, description="lora_alpha, 1..65536")
    dropout: float = Field(0.0, ge=0, lt=1, description="lora_dropout, [0, 1)")
    target_modules: str | list[Ident] | None = Field(
        None,
        max_length=256,
        description="module names, 'all-linear', or null for PEFT's per-architecture default",
    )
    merge_on_save: bool = Field(
        False, description="write merged full weights as the final model instead of an adapter"
    )

    @field_validator("target_modules")
    @classmethod
    def _known_shorthand(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, str) and value != "all-linear":
            raise ValueError("a string must be 'all-linear'; otherwise give a list of names")
        if isinstance(value, list) and not value:
            raise ValueError("must not be empty; use null for PEFT's default modules")
        return value


class PeftSpec(_Spec):
    """A PEFT adapter other than LoRA (LoRA is ``model.lora``), in PEFT's own terms.

    ``ia3``: learned scaling vectors on ``target_modules`` (PEFT's ``IA3Config``); the
    ``feedforward_modules`` among them are scaled on their input. ``prefix_tuning``:
    ``num_virtual_tokens`` trained key/value prefixes per layer (``PrefixTuningConfig``).
    """

    adapter: Literal["ia3", "prefix_tuning"] = Field(description="ia3 | prefix_tuning")
    target_modules: list[Ident] | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="ia3: modules to scale; null = PEFT's per-architecture default",
    )
    feedforward_modules: list[Ident] | None = Field(
        None,
        max_length=256,
        description="ia3: the feed-forward ones among target_modules; null = PEFT's default",
    )
    num_virtual_tokens: int | None = Field(
        None, ge=1, le=4096, description="prefix_tuning: prefix length, 1..4096 (null = 20)"
    )
    merge_on_save: bool = Field(
        False, description="ia3: write merged full weights as the final model"
    )


class InitFromSpec(_Spec):
    """Start from another job's verified checkpoint (same team), instead of the base weights.

    ``checkpoint``: ``latest``, ``best`` (the job's best eval) or a step number. By default
    only the weights are taken (fresh optimizer, schedule and data order); ``resume: true``
    continues that run exactly (optimizer, scheduler, step and data position too).
    """

    job: str = Field(
        min_length=1, max_length=64, pattern=r"^job-[0-9a-z]+$", description="a job id, job-..."
    )
    checkpoint: Literal["latest", "best"] | Annotated[int, Field(ge=1, le=_MAX_STEPS)] = Field(
        "latest", description="latest | best | a step number"
    )
    resume: bool = Field(False, description="true: optimizer, scheduler and data position too")
    # Filled by the service (pass 2) with the checkpoint's directory; users leave it null.
    path: PathOrHub | None = Field(None, description="set by the service; leave null")


class QuantizationSpec(_Spec):
    """A base model loaded quantized by bitsandbytes (``BitsAndBytesConfig``), frozen, with
    LoRA adapters trained on top: QLoRA. Needs GPU workers."""

    bits: Annotated[Literal[4, 8], BeforeValidator(_not_bool)] = Field(
        description="4 | 8 bits per base weight"
    )
    quant_type: Literal["nf4", "fp4"] | None = Field(
        None, description="4-bit only: nf4 | fp4 (null = nf4)"
    )
    compute_dtype: Dtype = Field(
        "bfloat16", description="dtype the 4-bit layers compute in: " + " | ".join(DTYPES)
    )
    double_quant: bool = Field(
        False, description="4-bit only: quantize the absmax too (~0.4 bit less a weight)"
    )


class ModelSpec(_Spec):
    """The model to train: where its weights (or config) come from, its task and dtype."""

    name_or_path: PathOrHub | None = Field(
        None, description="local model dir inside a data root, or a hub id"
    )
    tokenizer: PathOrHub | None = Field(
        None, description="local dir or hub id; defaults to name_or_path"
    )
    task: Task = Field(description="what the model learns: " + " | ".join(TASKS))
    num_labels: int | None = Field(
        None, ge=1, le=1_000_000, description="classification tasks: 2..1,000,000"
    )
    from_scratch: bool = Field(
        False, description="initialise weights randomly from the config instead of loading them"
    )
    config_overrides: dict[str, JsonValue] = Field(
        default_factory=dict, max_length=1024, description="model config keys, ≤ 1024"
    )
    dtype: Dtype = Field("float32", description="parameter dtype; float16 needs GPUs")
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in backward: less memory, ~30% more compute"
    )
    lora: LoraSpec | None = Field(None, description="train LoRA adapters instead of all weights")
    peft: PeftSpec | None = Field(
        None,
        description="another PEFT adapter instead of all weights: {adapter: ia3 | prefix_tuning}",
    )
    init_from: InitFromSpec | None = Field(
        None, description="start from another job's checkpoint: {job, checkpoint, resume}"
    )
    quantization: QuantizationSpec | None = Field(
        None, description="load the base quantized (bitsandbytes) and train model.lora: QLoRA"
    )


class DataSource(_Spec):
    """One dataset: a local file ``{path, format, delimiter}``, ``{hub, config, split}``, an
    uploaded dataset ``{dataset: ds-...}`` or files in a bucket ``{uri: s3://bucket/p/*.parquet}``.

    A bare string is shorthand for ``{path: <string>}``.
    """

    path: PathOrHub | None = Field(
        None, description="a local file inside a data root (relative paths are tried per root)"
    )
    format: DataFormat | None = Field(None, description="inferred from the suffix if omitted")
    delimiter: str | None = Field(
        None, min_length=1, max_length=1, description="csv only; one character"
    )
    hub: str | None = Field(None, max_length=200, description="dataset id on the hub")
    dataset: str | None = Field(
        None,
        max_length=40,
        pattern=r"^ds-[0-9a-z]{8,36}$",
        description="an uploaded dataset's id, ds-... (shunter data push)",
    )
    uri: str | None = Field(
        None,
        max_length=4096,
        pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s?#]+$",
        description="s3://bucket/key or s3://bucket/prefix/*.parquet, in a bucket the server "
        "allows the team (SHUNTER_DATA_BUCKETS); read with the server's credentials",
    )
    config: Ident | None = Field(None, description="hub dataset configuration name")
    split: str | None = Field(
        None, max_length=128, pattern=r"^[A-Za-z0-9_.:%+\[\]-]+$", description="default 'train'"
    )

    @model_validator(mode="before")
    @classmethod
    def _infer_format(cls, data: Any) -> Any:
        # A bare string is the path form's shorthand: `train: sst2/train.tsv`.
        if isinstance(data, str):
            if data.startswith("ds-") and OBJECT_ID_RE.fullmatch(data):
                data = {"dataset": data}
            else:
                data = {"uri": data} if data.startswith("s3://") else {"path": data}
        # Fill format/delimiter from the file suffix so the stored spec is explicit.
        if not isinstance(data, dict):
            return data
        named = data.get("path") if data.get("path") is not None else data.get("uri")
        if not isinstance(named, str):
            return data
        suffix = PurePosixPath(named).suffix.lower()
        fmt, delim = _SUFFIX_FORMATS.get(suffix, (None, None))
        data = dict(data)
        if data.get("format") is None and fmt is not None:
            data["format"] = fmt
        if data.get("format") == "csv" and data.get("delimiter") is None:
            data["delimiter"] = delim if fmt == "csv" and delim else ","
        return data

    @model_validator(mode="after")
    def _one_form(self) -> DataSource:
        local = [k for k in ("path", "format", "delimiter") if getattr(self, k) is not None]
        hub = [k for k in ("hub", "config", "split") if getattr(self, k) is not None]
        forms = [k for k in ("path", "hub", "dataset", "uri") if getattr(self, k) is not None]
        if len(forms) > 1 and (self.dataset is not None or self.uri is not None):
            raise ValueError(f"give one of path, hub, dataset, uri; got {', '.join(forms)}")
        if self.dataset is not None:
            if local or hub:
                raise ValueError(f"{', '.join(local + hub)} do not go with dataset; drop them")
            return self
        if self.uri is not None:
            if hub:
                raise ValueError(f"{', '.join(hub)} belong to the hub form; drop them or uri")
            if self.format is None:
                raise ValueError(
                    "cannot infer format from the uri; set format: " + " | ".join(DATA_FORMATS)
                )
            if self.delimiter is not None and self.format != "csv":
                raise ValueError("delimiter is only for format csv")
            return self
        if self.path is None and self.hub is None:
            raise ValueError(
                "give either path (a local file), hub (a dataset id), dataset (ds-...) or "
                "uri (s3://...)"
            )
        if self.path is not None and hub:
            raise ValueError(f"{', '.join(hub)} belong to the hub form; drop them or path")
        if self.hub is not None and local:
            raise ValueError(f"{', '.join(local)} belong to the path form; drop them or hub")
        if self.hub is not None and not HUB_ID_RE.fullmatch(self.hub):
            raise ValueError(f"hub {self.hub!r} is not a dataset id like 'glue' or 'org/name'")
        if self.path is not None and self.format is None:
            raise ValueError(
                "cannot infer format from the file name; set format: " + " | ".join(DATA_FORMATS)
            )
        if self.delimiter is not None and self.format != "csv":
            raise ValueError("delimiter is only for format csv")
        if self.hub is not None and self.split is None:
            return self.model_copy(update={"split": "train"})
        return self


class _PathShorthand:
    """JSON schema of a data source field: the object, or the bare path string that
    ``DataSource`` also takes (validation already does; this tells editors)."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        path = {"type": "string", "minLength": 1, "maxLength": 4096}
        return {"anyOf": [handler(core_schema), path]}


DataSourceField = Annotated[DataSource, _PathShorthand()]


class DataSpec(_Spec):
    """Training (and evaluation) data and how to turn rows into model inputs."""

    train: DataSourceField = Field(description="the training dataset: {path} or {hub}, or a path")
    eval: DataSourceField | None = Field(
        None, description="evaluation dataset; needed by eval_strategy and best-model tracking"
    )
    text_field: Ident = Field("text", description="the column with the input text")
    text_pair_field: Ident | None = Field(None, description="sequence-classification only")
    label_field: Ident | None = Field(
        None,
        description="classification, regression, multi-label (a list of label ids) and "
        "question-answering ({text: [...], answer_start: [...]}): required",
    )
    target_field: Ident | None = Field(None, description="seq2seq only: the target text column")
    messages_field: Ident = Field(
        "messages", description="chat-sft only: the column with the list of chat messages"
    )
    max_length: int = Field(
        128, ge=2, le=1_048_576, description="tokens per sequence, 2..1,048,576 (truncation)"
    )
    packing: bool = Field(
        False,
        description="causal-lm: concatenate and cut to max_length; chat-sft: pack whole "
        "examples into max_length rows, attention kept within each example",
    )


GaloreProjection = Literal["std", "reverse_std", "right", "left"]


class OptimArgs(_Spec):
    """Hugging Face's ``optim_args`` as typed keys: GaLore's, with HF's defaults."""

    rank: int | None = Field(
        None, ge=1, le=65536, description="galore_*: rank of the projection, 1..65536 (null = 128)"
    )
    update_proj_gap: int | None = Field(
        None,
        ge=1,
        le=_MAX_STEPS,
        description="galore_*: steps between projector updates (an SVD each), 1..1e9 (null = 200)",
    )
    scale: float | None = Field(
        None, gt=0, le=1000, description="galore_*: update scale, (0, 1000] (null = 0.25)"
    )
    proj_type: GaloreProjection | None = Field(
        None, description="galore_*: std | reverse_std | right | left (null = std)"
    )


class TrainingSpec(_Spec):
    """Hugging Face ``TrainingArguments`` names and meanings."""

    output_dir: PathOrHub | None = Field(
        None, description="set by the service per job; only torchrun users set it"
    )
    num_train_epochs: float = Field(1.0, ge=0, le=100_000, description="0..100,000")
    max_steps: int = Field(
        -1, ge=-1, le=_MAX_STEPS, description="-1 (use epochs) or 1..1e9; > 0 overrides epochs"
    )
    per_device_train_batch_size: BatchSize = Field(
        16, description="examples per worker per micro-step, 1..65536"
    )
    per_device_eval_batch_size: BatchSize = Field(
        32, description="examples per worker per eval step, 1..65536"
    )
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536, description="1..65536")
    learning_rate: float = Field(5e-5, gt=0, le=10, description="(0, 10]")
    weight_decay: float = Field(0.0, ge=0, le=10, description="[0, 10]")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="[0, 1)")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="[0, 1)")
    adam_epsilon: float = Field(1e-8, gt=0, le=1, description="(0, 1]")
    max_grad_norm: float = Field(1.0, ge=0, le=1e6, description="0 disables clipping; ≤ 1e6")
    # HF's default since transformers 5 (torch >= 2.8): on CPU ~5x less optimizer time than the
    # for-loop adamw_torch (issue #33). Stored specs carry the value they were submitted with.
    optim: Optimizer = Field(
        "adamw_torch_fused", description="optimizer: " + " | ".join(OPTIMIZERS)
    )
    optim_target_modules: (
        Literal["all-linear"] | Annotated[list[Ident], Field(min_length=1, max_length=256)] | None
    ) = Field(
        None,
        description="galore_* (required): linear modules GaLore projects, names (a module "
        "whose name contains one, as HF matches them) or 'all-linear'",
    )
    optim_args: OptimArgs | None = Field(
        None, description="optimizer keys: rank, update_proj_gap, scale, proj_type (galore_*)"
    )
    loraplus_lr_ratio: float | None = Field(
        None,
        gt=0,
        le=10_000,
        description="LoRA+ (with model.lora): the B matrices learn at this ratio x "
        "learning_rate, (0, 10000]; HF's loraplus_lr_ratio",
    )
    lr_scheduler_type: LrScheduler = Field(
        "linear", description="learning-rate schedule: " + " | ".join(LR_SCHEDULERS)
    )
    warmup_steps: int = Field(0, ge=0, le=_MAX_STEPS, description="0..1e9")
    warmup_ratio: float = Field(0.0, ge=0, le=1, description="[0, 1] of total steps")
    bf16: bool = Field(False, description="bfloat16 mixed precision (autocast)")
    fp16: bool = Field(False, description="float16 mixed precision with a grad scaler; GPUs only")
    logging_steps: Steps = Field(10, description="1..1e9")
    eval_strategy: Interval = Field("no", description="when to evaluate: no | steps | epoch")
    eval_steps: Steps | None = Field(None, description="1..1e9; steps: defaults to logging_steps")
    save_strategy: Literal["no", "steps", "epoch", "best"] = Field(
        "steps", description="best: save after each eval that improves metric_for_best_model"
    )
    save_steps: Steps = Field(500, description="1..1e9")
    save_total_limit: int | None = Field(None, ge=1, le=10_000, description="1..10,000")
    load_best_model_at_end: bool = Field(
        False, description="the final model is the best checkpoint by metric_for_best_model"
    )
    metric_for_best_model: Ident | None = Field(
        None, description="loss, accuracy (classification) or perplexity (LM), maybe eval_-prefixed"
    )
    greater_is_better: bool | None = Field(
        None, description="default: false for metrics ending in 'loss' or 'perplexity'"
    )
    early_stopping_patience: int | None = Field(None, ge=1, le=1_000_000, description="evals")
    seed: int = Field(42, ge=0, le=2**32 - 1, description="0..2^32-1")
    report_to: list[Literal["tensorboard", "mlflow"]] = Field(
        default_factory=list,
        max_length=2,
        description=(
            "also write metrics to: tensorboard (event files in the job's storage, "
            "`shunter tensorboard JOB`), mlflow (the server's SHUNTER_MLFLOW_TRACKING_URI); "
            "needs shunter[tracking] on the workers. Metrics always go to the API too"
        ),
    )
    group_by_length: bool = Field(
        False,
        description="batch examples of similar length (inside shuffled mega-batches): less padding",
    )
    class_weights: list[Annotated[float, Field(gt=0, le=1e6)]] | None = Field(
        None,
        max_length=1_000_000,
        description="classification: one weight (0, 1e6] per label for the cross-entropy",
    )
    label_smoothing_factor: float = Field(
        0.0, ge=0, lt=1, description="[0, 1); cross-entropy tasks (HF's label_smoothing_factor)"
    )

    @field_validator("eval_strategy", "save_strategy", mode="before")
    @classmethod
    def _yaml_no(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `no` as false; that is what the user meant.
        return "no" if value is False else value


class FsdpSpec(_Spec):
    """FSDP2 options (strategy fsdp or fsdp+tp)."""

    sharding: FsdpSharding = Field(
        "full_shard",
        description="full_shard: params+grads+optimizer state; shard_grad_op: grads+state; "
        "hybrid_shard: full_shard inside groups, replicated across; no_shard: like DDP",
    )
    cpu_offload: bool = Field(False, description="keep sharded parameters on the CPU")
    mixed_precision: FsdpMixedPrecision = Field(
        "autocast",
        description="with bf16/fp16: autocast gathers fp32 parameters and computes under "
        "torch.autocast (the numbers DDP gives); params gathers them in bf16/fp16 (half the "
        "all-gather bytes, faster, drifts from DDP by ~1e-2 in loss)",
    )
    hybrid_shard_size: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="hybrid_shard only: ranks per shard group, dividing num_workers; "
        "null = the ranks of one node",
    )


class DeepSpeedSpec(_Spec):
    """DeepSpeed ZeRO options (strategy deepspeed)."""

    stage: Annotated[DeepSpeedStage, BeforeValidator(_not_bool)] = Field(
        2, description="ZeRO stage: 0 (DDP-like), 1 (optimizer state), 2 (+grads), 3 (+params)"
    )
    offload_optimizer: bool = Field(
        False, description="optimizer state in CPU memory; stage 1, 2 or 3"
    )
    offload_param: bool = Field(False, description="parameters in CPU memory; stage 3")
    mixed_precision: FsdpMixedPrecision = Field(
        "params",
        description="with bf16: params is DeepSpeed's own (bf16 parameters, fp32 master copy "
        "in the optimizer); autocast keeps fp32 parameters and runs forward under "
        "torch.autocast (DeepSpeed's torch_autocast: the numbers DDP gives). fp16 is always "
        "DeepSpeed's own, with its loss scaler",
    )
    config: dict[str, JsonValue] | None = Field(
        None,
        max_length=256,
        description="a DeepSpeed config merged over ours; values must agree with the spec or be "
        "'auto' (filled from the spec)",
    )


class DistributedSpec(_Spec):
    """How the model is spread over the workers."""

    strategy: Strategy = Field("ddp", description="parallelism: " + " | ".join(STRATEGIES))
    fsdp: FsdpSpec = Field(default_factory=FsdpSpec, description="strategy fsdp / fsdp+tp")
    deepspeed: DeepSpeedSpec = Field(
        default_factory=DeepSpeedSpec, description="strategy deepspeed"
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=1024, description="ranks per tensor-parallel group (tp, fsdp+tp), 1..1024"
    )
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        le=1024,
        description="pipeline stages (strategy ddp: a dp x pp mesh, consecutive decoder layers "
        "per stage; Llama-family causal LMs), 1..1024; must divide num_workers and the layers",
    )
    pipeline_schedule: PipelineSchedule = Field(
        "1f1b", description="pipeline schedule: gpipe | 1f1b (pipeline_parallel_size > 1)"
    )
    pipeline_microbatches: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="micro-batches per step through the pipeline; null = "
        "training.gradient_accumulation_steps; 1f1b needs at least pipeline_parallel_size",
    )
    context_parallel_size: int = Field(
        1,
        ge=1,
        le=1024,
        description="ranks splitting each sequence (torch context_parallel; CUDA only), 1..1024; "
        "2 x it must divide data.max_length",
    )


class ResourcesSpec(_Spec):
    """The gang: num_workers processes, each on one node with these resources."""

    num_workers: int = Field(2, ge=1, le=1024, description="1..1024 (one process each)")
    gpus_per_worker: int = Field(
        1, ge=0, le=64, description="0 = CPU workers (gloo) or 1; more GPUs = more num_workers"
    )
    cpus_per_worker: float = Field(1.0, gt=0, le=1024, description="(0, 1024]")


class SchedulingSpec(_Spec):
    """How the scheduler may treat the job once it runs."""

    preemptible: bool = Field(
        True,
        description=(
            "true: a higher-priority or under-share job may stop this one at a step boundary "
            "(it checkpoints and requeues, losing no step); false only where the team's policy "
            "allows it"
        ),
    )


class DivergenceSpec(_Spec):
    """Divergence guard of the training loop: skip bad steps, roll back, give up."""

    enabled: bool = Field(True, description="check every step's loss and gradient norm")
    spike_zscore: float = Field(
        6.0,
        ge=0,
        le=1000,
        description="skip a step whose loss is this many standard deviations above the mean of "
        "the recent window; 0 = only non-finite losses/gradient norms are skipped",
    )
    spike_window: int = Field(
        100, ge=8, le=100_000, description="recent good steps the z-score is taken over, 8..100,000"
    )
    max_skips: int = Field(
        5, ge=1, le=10_000, description="skipped steps within skip_window that roll back, 1..10,000"
    )
    skip_window: int = Field(
        100, ge=1, le=1_000_000, description="steps the skips are counted over, 1..1,000,000"
    )
    max_rollbacks: int = Field(
        3,
        ge=0,
        le=1000,
        description="rollbacks to the last good checkpoint before the job fails as diverged, "
        "0..1000",
    )


class HangSpec(_Spec):
    """Hang watch of the service: a job whose steps stop is caught, its stacks kept, resumed.

    Bounds here are the absolute ones; the service's admin narrows them
    (``SHUNTER_HEALTH_HANG_*``), checked at submit."""

    factor: float = Field(
        10.0,
        ge=1,
        le=1000,
        description="hung after factor x the median step time with no new step, 1..1000",
    )
    floor_s: float = Field(
        300.0,
        ge=1,
        le=604_800,
        description="never hung before this many seconds without a new step, 1..604,800 "
        "(keep it above the longest eval or checkpoint save)",
    )
    startup_s: float = Field(
        900.0,
        ge=1,
        le=604_800,
        description="hung when an attempt reports no step this many seconds after its launch, "
        "1..604,800",
    )


class StragglerSpec(_Spec):
    """Straggler and throughput watch: per-rank step times, judged by the service per window."""

    enabled: bool = Field(
        True, description="time every rank's steps and report them once per window"
    )
    window_steps: int = Field(
        50,
        ge=1,
        le=1_000_000,
        description="steps per window, 1..1,000,000; rounded up to a multiple of "
        "training.logging_steps (the times travel with the logged metrics)",
    )
    factor: float = Field(
        1.5,
        gt=1,
        le=100,
        description="a rank whose compute time over a window is above factor x the gang's "
        "median is a straggler, >1..100",
    )
    throughput_drop: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="a window whose samples/s or tokens/s is below this share of the job's own "
        "median window is a throughput drop, (0, 1)",
    )


class HealthSpec(_Spec):
    """Training-health checks (issue #23)."""

    divergence: DivergenceSpec = Field(
        default_factory=DivergenceSpec, description="loss-spike / NaN guard"
    )
    hang: HangSpec = Field(
        default_factory=HangSpec, description="hang watch: stacks, then a resume from checkpoint"
    )
    straggler: StragglerSpec = Field(
        default_factory=StragglerSpec,
        description="per-rank step times; straggler and throughput-drop events",
    )


class NotifySpec(_Spec):
    """Send this job's events to one of the team's webhook endpoints (signed with its
    secret). The service checks that the URL is registered and may be called."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        json_schema_extra={"pattern": "^https?://"},
        description="a webhook endpoint of the job's team (http:// or https://)",
    )
    events: list[WebhookEventType] | None = Field(
        None,
        min_length=1,
        description="the event types to send (omitted: all of them)",
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.lower().startswith(("http://", "https://")):
            raise ValueError(
                "use an http:// or https:// URL, one of your team's webhook endpoints"
                " (shunter webhooks create URL)"
            )
        return value


class JobSpec(_Spec):
    """A training job as submitted (and, after ``validate_spec``, as resolved)."""

    name: str = Field(
        min_length=1,
        max_length=63,
        json_schema_extra={"pattern": _NAME_RE.pattern},
        description="lower-case letters, digits, '.', '_', '-'; ≤ 63 chars",
    )
    model: ModelSpec = Field(description="the model, its task and adapters")
    data: DataSpec = Field(description="datasets and columns")
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="Hugging Face TrainingArguments names"
    )
    distributed: DistributedSpec = Field(
        default_factory=DistributedSpec, description="parallelism strategy"
    )
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="workers and their CPUs/GPUs"
    )
    scheduling: SchedulingSpec = Field(
        default_factory=SchedulingSpec, description="preemption and other scheduler treatment"
    )
    health: HealthSpec = Field(
        default_factory=HealthSpec, description="divergence guard and hang watch"
    )
    priority: Priority = Field("normal", description="scheduling priority: low | normal | high")
    max_restarts: int = Field(2, ge=0, le=100, description="Ray Train restarts, 0..100")
    max_runtime_seconds: int | None = Field(
        None, ge=1, le=31_536_000, description="1..31,536,000 (a year)"
    )
    notify: list[NotifySpec] = Field(
        default_factory=list,
        max_length=8,
        description="webhooks for this job's events, beside the team's defaults (≤ 8)",
    )

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(
                "use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
            )
        return value

    @field_validator("notify")
    @classmethod
    def _notify_once_per_url(cls, value: list[NotifySpec]) -> list[NotifySpec]:
        urls = [n.url for n in value]
        if len(set(urls)) != len(urls):
            raise ValueError("name each URL once, with all its event types in one entry")
        return value
