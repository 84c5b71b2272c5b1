"""The JobSpec's ``model`` and ``data`` sections: the model with its adapters, initialisation
and quantization, and the datasets with their columns."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    GetJsonSchemaHandler,
    JsonValue,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from shunter.jobspec.spec_fields import (
    DATA_FORMATS,
    DTYPES,
    HUB_ID_RE,
    MAX_STEPS,
    OBJECT_ID_RE,
    SUFFIX_FORMATS,
    TASKS,
    DataFormat,
    Dtype,
    Ident,
    PathOrHub,
    StrictModel,
    Task,
    not_bool,
)

__all__ = [
    "DataSource",
    "DataSpec",
    "InitFromSpec",
    "LoraSpec",
    "ModelSpec",
    "PeftSpec",
    "QuantizationSpec",
]


class LoraSpec(StrictModel):
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


class PeftSpec(StrictModel):
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


class InitFromSpec(StrictModel):
    """Start from another job's verified checkpoint (same team), instead of the base weights.

    ``checkpoint``: ``latest``, ``best`` (the job's best eval) or a step number. By default
    only the weights are taken (fresh optimizer, schedule and data order); ``resume: true``
    continues that run exactly (optimizer, scheduler, step and data position too).
    """

    job: str = Field(
        min_length=1, max_length=64, pattern=r"^job-[0-9a-z]+$", description="a job id, job-..."
    )
    checkpoint: Literal["latest", "best"] | Annotated[int, Field(ge=1, le=MAX_STEPS)] = Field(
        "latest", description="latest | best | a step number"
    )
    resume: bool = Field(False, description="true: optimizer, scheduler and data position too")
    # Filled by the service (pass 2) with the checkpoint's directory; users leave it null.
    path: PathOrHub | None = Field(None, description="set by the service; leave null")


class QuantizationSpec(StrictModel):
    """A base model loaded quantized by bitsandbytes (``BitsAndBytesConfig``), frozen, with
    LoRA adapters trained on top: QLoRA. Needs GPU workers."""

    bits: Annotated[Literal[4, 8], BeforeValidator(not_bool)] = Field(
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


class ModelSpec(StrictModel):
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


class DataSource(StrictModel):
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
        fmt, delim = SUFFIX_FORMATS.get(suffix, (None, None))
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


class DataSpec(StrictModel):
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
