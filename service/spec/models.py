"""The JobSpec (v1) schema: fields, defaults, enums and per-field bounds.

Exactly DESIGN.md's "JobSpec (v1)". Every object forbids unknown keys; every number is
bounded (the bounds are in each field's description, so they show in OpenAPI). Rules that
involve more than one field live in ``service.spec.rules``; path resolution in
``service.spec.paths``. Decisions DESIGN.md left open, written down here:

- ``name``, ``model.task``, ``model`` and ``data.train`` are required; everything else has
  the default DESIGN.md shows.
- ``data.*.format`` may be omitted and is then inferred from the file suffix
  (``.csv``/``.tsv`` → csv with ``,``/tab delimiter, ``.json``, ``.jsonl``, ``.txt`` → text,
  ``.parquet``); the resolved spec always has it.
- ``eval_strategy``/``save_strategy`` accept YAML's ``no`` → ``false`` as ``"no"``.
- Numbers arrive in lax mode ("5e-5" from YAML 1.1 is a string; it is read as a float), but
  NaN and infinities are rejected everywhere.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
    field_validator,
    model_validator,
)

__all__ = [
    "DATA_FORMATS",
    "HUB_ID_RE",
    "TASKS",
    "DataSource",
    "DataSpec",
    "DeepSpeedSpec",
    "DistributedSpec",
    "FsdpSpec",
    "JobSpec",
    "LoraSpec",
    "ModelSpec",
    "ResourcesSpec",
    "TrainingSpec",
]

Task = Literal["causal-lm", "sequence-classification", "token-classification", "masked-lm"]
TASKS: tuple[str, ...] = get_args(Task)
DataFormat = Literal["csv", "json", "jsonl", "text", "parquet"]
DATA_FORMATS: tuple[str, ...] = get_args(DataFormat)

# A Hugging Face hub id: `name` or `org/name`; each part starts alphanumeric.
HUB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")

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
BatchSize = Annotated[int, Field(ge=1, le=65536, description="1..65536")]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, str_max_length=4096)


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
    merge_on_save: bool = False

    @field_validator("target_modules")
    @classmethod
    def _known_shorthand(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, str) and value != "all-linear":
            raise ValueError("a string must be 'all-linear'; otherwise give a list of names")
        if isinstance(value, list) and not value:
            raise ValueError("must not be empty; use null for PEFT's default modules")
        return value


class ModelSpec(_Spec):
    name_or_path: PathOrHub | None = Field(
        None, description="local model dir inside a data root, or a hub id"
    )
    tokenizer: PathOrHub | None = Field(
        None, description="local dir or hub id; defaults to name_or_path"
    )
    task: Task
    num_labels: int | None = Field(
        None, ge=1, le=1_000_000, description="classification tasks: 2..1,000,000"
    )
    from_scratch: bool = False
    config_overrides: dict[str, JsonValue] = Field(
        default_factory=dict, max_length=1024, description="model config keys, ≤ 1024"
    )
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gradient_checkpointing: bool = False
    lora: LoraSpec | None = None


class DataSource(_Spec):
    """One dataset: a local file ``{path, format, delimiter}`` or ``{hub, config, split}``.

    A bare string is shorthand for ``{path: <string>}``.
    """

    path: PathOrHub | None = None
    format: DataFormat | None = Field(None, description="inferred from the suffix if omitted")
    delimiter: str | None = Field(
        None, min_length=1, max_length=1, description="csv only; one character"
    )
    hub: str | None = Field(None, max_length=200, description="dataset id on the hub")
    config: Ident | None = None
    split: str | None = Field(
        None, max_length=128, pattern=r"^[A-Za-z0-9_.:%+\[\]-]+$", description="default 'train'"
    )

    @model_validator(mode="before")
    @classmethod
    def _infer_format(cls, data: Any) -> Any:
        # A bare string is the path form's shorthand: `train: sst2/train.tsv`.
        if isinstance(data, str):
            data = {"path": data}
        # Fill format/delimiter from the file suffix so the stored spec is explicit.
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            return data
        suffix = PurePosixPath(data["path"]).suffix.lower()
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
        if self.path is None and self.hub is None:
            raise ValueError("give either path (a local file) or hub (a dataset id)")
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


class DataSpec(_Spec):
    train: DataSource
    eval: DataSource | None = None
    text_field: Ident = "text"
    text_pair_field: Ident | None = Field(None, description="sequence-classification only")
    label_field: Ident | None = Field(None, description="classification tasks: required")
    max_length: int = Field(128, ge=1, le=1_048_576, description="tokens, 1..1,048,576")
    packing: bool = Field(False, description="causal-lm only: pack sequences to max_length")


class TrainingSpec(_Spec):
    """Hugging Face ``TrainingArguments`` names and meanings."""

    output_dir: PathOrHub | None = Field(
        None, description="set by the service per job; only torchrun users set it"
    )
    num_train_epochs: float = Field(1.0, ge=0, le=100_000, description="0..100,000")
    max_steps: int = Field(
        -1, ge=-1, le=_MAX_STEPS, description="-1 (use epochs) or 1..1e9; > 0 overrides epochs"
    )
    per_device_train_batch_size: BatchSize = 16
    per_device_eval_batch_size: BatchSize = 32
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536, description="1..65536")
    learning_rate: float = Field(5e-5, gt=0, le=10, description="(0, 10]")
    weight_decay: float = Field(0.0, ge=0, le=10, description="[0, 10]")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="[0, 1)")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="[0, 1)")
    adam_epsilon: float = Field(1e-8, gt=0, le=1, description="(0, 1]")
    max_grad_norm: float = Field(1.0, ge=0, le=1e6, description="0 disables clipping; ≤ 1e6")
    optim: Literal["adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "lion"] = "adamw_torch"
    lr_scheduler_type: Literal[
        "linear",
        "cosine",
        "constant",
        "constant_with_warmup",
        "polynomial",
        "cosine_with_restarts",
        "reduce_lr_on_plateau",
    ] = "linear"
    warmup_steps: int = Field(0, ge=0, le=_MAX_STEPS, description="0..1e9")
    warmup_ratio: float = Field(0.0, ge=0, le=1, description="[0, 1] of total steps")
    bf16: bool = False
    fp16: bool = False
    logging_steps: Steps = Field(10, description="1..1e9")
    eval_strategy: Literal["no", "steps", "epoch"] = "no"
    eval_steps: Steps | None = Field(None, description="1..1e9; steps: defaults to logging_steps")
    save_strategy: Literal["no", "steps", "epoch"] = "steps"
    save_steps: Steps = Field(500, description="1..1e9")
    save_total_limit: int | None = Field(None, ge=1, le=10_000, description="1..10,000")
    load_best_model_at_end: bool = False
    metric_for_best_model: Ident | None = None
    greater_is_better: bool | None = Field(
        None, description="default: false for metrics ending in 'loss' or 'perplexity'"
    )
    early_stopping_patience: int | None = Field(None, ge=1, le=1_000_000, description="evals")
    seed: int = Field(42, ge=0, le=2**32 - 1, description="0..2^32-1")

    @field_validator("eval_strategy", "save_strategy", mode="before")
    @classmethod
    def _yaml_no(cls, value: Any) -> Any:
        # YAML 1.1 reads an unquoted `no` as false; that is what the user meant.
        return "no" if value is False else value


class FsdpSpec(_Spec):
    sharding: Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"] = "full_shard"
    cpu_offload: bool = False


class DeepSpeedSpec(_Spec):
    stage: Literal[0, 1, 2, 3] = 2
    offload_optimizer: bool = False
    offload_param: bool = False
    config: dict[str, JsonValue] | None = Field(
        None,
        max_length=256,
        description="a full DeepSpeed config passed through; its values must agree with ours",
    )


class DistributedSpec(_Spec):
    strategy: Literal["ddp", "fsdp", "deepspeed", "tp", "fsdp+tp"] = "ddp"
    fsdp: FsdpSpec = Field(default_factory=FsdpSpec)
    deepspeed: DeepSpeedSpec = Field(default_factory=DeepSpeedSpec)
    tensor_parallel_size: int = Field(1, ge=1, le=1024, description="1..1024")


class ResourcesSpec(_Spec):
    num_workers: int = Field(2, ge=1, le=1024, description="1..1024 (one process each)")
    gpus_per_worker: int = Field(1, ge=0, le=64, description="0 = CPU workers (gloo); ≤ 64")
    cpus_per_worker: float = Field(1.0, gt=0, le=1024, description="(0, 1024]")


class JobSpec(_Spec):
    """A training job as submitted (and, after ``validate_spec``, as resolved)."""

    name: str = Field(
        min_length=1,
        max_length=63,
        json_schema_extra={"pattern": _NAME_RE.pattern},
        description="lower-case letters, digits, '.', '_', '-'; ≤ 63 chars",
    )
    model: ModelSpec
    data: DataSpec
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    distributed: DistributedSpec = Field(default_factory=DistributedSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    priority: Literal["low", "normal", "high"] = "normal"
    max_restarts: int = Field(2, ge=0, le=100, description="Ray Train restarts, 0..100")
    max_runtime_seconds: int | None = Field(
        None, ge=1, le=31_536_000, description="1..31,536,000 (a year)"
    )

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(
                "use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
            )
        return value
