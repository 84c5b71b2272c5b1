"""The JobSpec's vocabulary: the enums (tasks, formats, optimizers, strategies, ...), the
shared field types with their bounds, and ``StrictModel``, the base of every spec object."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
)

__all__ = [
    "DATA_FORMATS",
    "DEEPSPEED_STAGES",
    "DTYPES",
    "FSDP_SHARDINGS",
    "GALORE_OPTIMIZERS",
    "HUB_ID_RE",
    "LR_SCHEDULERS",
    "MAX_STEPS",
    "NAME_RE",
    "OBJECT_ID_RE",
    "OPTIMIZERS",
    "STRATEGIES",
    "SUFFIX_FORMATS",
    "TASKS",
    "TP_STRATEGIES",
    "BatchSize",
    "DataFormat",
    "DeepSpeedStage",
    "Dtype",
    "FsdpMixedPrecision",
    "FsdpSharding",
    "Ident",
    "Interval",
    "LrScheduler",
    "Optimizer",
    "PathOrHub",
    "PipelineSchedule",
    "Steps",
    "Strategy",
    "StrictModel",
    "Task",
    "is_store_ref",
    "not_bool",
    "printable",
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


NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_STEPS = 1_000_000_000  # upper bound for every step count (≈ 30 years at 1 step/s)
SUFFIX_FORMATS: dict[str, tuple[str, str | None]] = {
    ".csv": ("csv", ","),
    ".tsv": ("csv", "\t"),
    ".json": ("json", None),
    ".jsonl": ("jsonl", None),
    ".txt": ("text", None),
    ".parquet": ("parquet", None),
}


def printable(value: str) -> str:
    # Paths and names end up in os calls, logs and PostgreSQL text: no control characters
    # (NUL in particular). Lone surrogates never get here: pydantic's str rejects them.
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not contain control characters")
    return value


PathOrHub = Annotated[
    str, StringConstraints(min_length=1, max_length=4096), AfterValidator(printable)
]
Ident = Annotated[str, StringConstraints(min_length=1, max_length=256), AfterValidator(printable)]
Steps = Annotated[int, Field(ge=1, le=MAX_STEPS)]


def not_bool(value: Any) -> Any:
    # A Literal of ints takes True as 1 (True == 1 in Python); `stage: true` is not stage 1.
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got the boolean {str(value).lower()}")
    return value


BatchSize = Annotated[int, Field(ge=1, le=65536, description="1..65536")]


class StrictModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, str_max_length=4096
    )
