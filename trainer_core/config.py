"""Typed, frozen configuration for one training run, built from a JobSpec dict.

``TrainConfig.from_spec(spec)`` reads the ``model``, ``data``, ``training`` and
``distributed`` sections of a JobSpec (DESIGN.md field names, Hugging Face
``TrainingArguments`` meanings). Any other top-level section (``name``, ``resources``, ...)
is the service's business and is ignored here. Unknown keys inside a section raise
``ConfigError`` naming the key, so a typo never silently trains with a default.

Each component gets only its sub-config: ``ModelConfig`` → ``model.py``, ``DataConfig`` →
``data.py``, ``TrainingConfig`` → ``optim.py``/``loop.py``/``checkpoint.py``, and
``ParallelConfig`` (owned by ``trainer_core.parallel``) → ``build_engine``.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch

from trainer_core.parallel import ParallelConfig

__all__ = [
    "TASKS",
    "ConfigError",
    "DataConfig",
    "DataSource",
    "LoraConfig",
    "ModelConfig",
    "TrainConfig",
    "TrainingConfig",
]

Task = Literal["causal-lm", "sequence-classification", "token-classification", "masked-lm"]
TASKS: tuple[str, ...] = (
    "causal-lm",
    "sequence-classification",
    "token-classification",
    "masked-lm",
)
_FORMATS = ("csv", "json", "jsonl", "parquet", "text")
_OPTIMS = ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "lion")
_SCHEDULERS = (
    "linear",
    "cosine",
    "constant",
    "constant_with_warmup",
    "polynomial",
    "cosine_with_restarts",
    "reduce_lr_on_plateau",
)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ConfigError(ValueError):
    """A spec value trainer_core cannot run with; the message says what to change."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True, kw_only=True)
class DataSource:
    """One dataset: a local file (``path`` + ``format``) or a hub dataset (``hub``)."""

    path: str | None = None
    format: str | None = None  # csv | json | jsonl | parquet | text; inferred from the suffix
    delimiter: str | None = None  # csv only; "\t" for TSV
    hub: str | None = None
    config: str | None = None
    split: str = "train"

    def __post_init__(self) -> None:
        _require(
            (self.path is None) != (self.hub is None),
            "a data source needs exactly one of `path` (local file) or `hub` (dataset id)",
        )
        if self.path is not None:
            _require(
                self.resolved_format in _FORMATS,
                f"data format {self.resolved_format!r} for {self.path!r} is not supported; "
                f"set `format` to one of {', '.join(_FORMATS)}",
            )

    @property
    def resolved_format(self) -> str:
        """The ``datasets`` builder name: explicit ``format`` or the file suffix."""
        fmt = self.format
        if fmt is None and self.path is not None:
            suffix = Path(self.path).suffix.lstrip(".").lower()
            fmt = {"tsv": "csv", "txt": "text", "jsonl": "json", "pq": "parquet"}.get(
                suffix, suffix
            )
        return "json" if fmt == "jsonl" else (fmt or "")


@dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """PEFT LoRA adapter. ``merge_on_save`` writes merged full weights as the final model."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] | str | None = None
    merge_on_save: bool = False

    def __post_init__(self) -> None:
        _require(self.r > 0, f"lora.r must be > 0 (got {self.r})")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    name_or_path: str | None = None
    tokenizer: str | None = None
    task: str = "sequence-classification"
    num_labels: int | None = None
    from_scratch: bool = False
    config_overrides: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"
    gradient_checkpointing: bool = False
    lora: LoraConfig | None = None

    def __post_init__(self) -> None:
        _require(self.task in TASKS, f"model.task {self.task!r} unknown; use one of {TASKS}")
        _require(
            self.dtype in _DTYPES, f"model.dtype {self.dtype!r} unknown; use one of {(*_DTYPES,)}"
        )
        _require(
            self.name_or_path is not None
            or (self.from_scratch and "model_type" in self.config_overrides),
            "set model.name_or_path, or from_scratch: true with config_overrides.model_type",
        )
        _require(
            self.tokenizer is not None or self.name_or_path is not None,
            "set model.tokenizer (or --tokenizer): a from-scratch model without name_or_path "
            "has no tokenizer",
        )

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def is_classification(self) -> bool:
        return self.task in ("sequence-classification", "token-classification")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    train: DataSource
    eval: DataSource | None = None
    text_field: str = "text"
    text_pair_field: str | None = None
    label_field: str | None = "label"
    max_length: int = 128
    packing: bool = False

    def __post_init__(self) -> None:
        _require(self.max_length > 1, f"data.max_length must be > 1 (got {self.max_length})")


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    output_dir: str | None = None
    num_train_epochs: float = 1.0
    max_steps: int = -1
    per_device_train_batch_size: int = 16
    per_device_eval_batch_size: int = 32
    gradient_accumulation_steps: int = 1
    learning_rate: float = 5e-5
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float | None = 1.0  # 0 or None: no clipping (HF: 0 disables it)
    optim: str = "adamw_torch"
    lr_scheduler_type: str = "linear"
    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    bf16: bool = False
    fp16: bool = False
    logging_steps: int = 10
    eval_strategy: str = "no"
    eval_steps: int | None = None
    save_strategy: str = "steps"
    save_steps: int = 500
    save_total_limit: int | None = None
    load_best_model_at_end: bool = False
    metric_for_best_model: str | None = None
    greater_is_better: bool | None = None
    early_stopping_patience: int | None = None
    seed: int = 42
    # Not in the service's JobSpec (yet); torchrun users and the bench may set them.
    group_by_length: bool = False  # batches of similar length inside shuffled mega-batches

    def __post_init__(self) -> None:
        _require(self.optim in _OPTIMS, f"training.optim {self.optim!r}: use one of {_OPTIMS}")
        _require(
            self.lr_scheduler_type in _SCHEDULERS,
            f"training.lr_scheduler_type {self.lr_scheduler_type!r}: use one of {_SCHEDULERS}",
        )
        _require(not (self.bf16 and self.fp16), "set at most one of training.bf16 / fp16")
        _require(
            not self.fp16 or torch.cuda.is_available(),
            "fp16 needs a CUDA device; use bf16 or fp32 on CPU",
        )
        _require(
            self.max_steps > 0 or self.num_train_epochs > 0,
            "set training.max_steps > 0 or training.num_train_epochs > 0",
        )
        _require(
            self.gradient_accumulation_steps >= 1,
            "training.gradient_accumulation_steps must be ≥ 1",
        )
        _require(self.per_device_train_batch_size >= 1, "per_device_train_batch_size must be ≥ 1")
        _require(self.logging_steps >= 1, "training.logging_steps must be ≥ 1")
        _require(0.0 <= self.warmup_ratio <= 1.0, "training.warmup_ratio must be in [0, 1]")
        for name in ("eval_strategy", "save_strategy"):
            value = getattr(self, name)
            _require(value in ("no", "steps", "epoch"), f"training.{name}: no | steps | epoch")
        _require(
            self.eval_strategy != "steps" or (self.eval_steps or self.logging_steps) > 0,
            "eval_strategy: steps needs eval_steps > 0",
        )
        _require(
            self.save_strategy != "steps" or self.save_steps > 0,
            "save_strategy: steps needs save_steps > 0",
        )
        if self.load_best_model_at_end or self.early_stopping_patience is not None:
            _require(
                self.eval_strategy != "no",
                "load_best_model_at_end / early_stopping_patience need eval_strategy steps|epoch",
            )
        if self.load_best_model_at_end:
            _require(
                self.save_strategy == self.eval_strategy,
                "load_best_model_at_end needs save_strategy equal to eval_strategy",
            )

    @property
    def clip_norm(self) -> float | None:
        """``max_grad_norm`` as the engine takes it: ``None`` when clipping is off."""
        return self.max_grad_norm or None

    @property
    def eval_every(self) -> int:
        """Optimizer steps between evals for eval_strategy=steps (HF: defaults to logging)."""
        return self.eval_steps or self.logging_steps

    @property
    def best_metric_name(self) -> str:
        """``metric_for_best_model`` with HF's ``eval_`` prefix, default ``eval_loss``."""
        name = self.metric_for_best_model or "loss"
        return name if name.startswith("eval_") else f"eval_{name}"

    @property
    def higher_is_better(self) -> bool:
        if self.greater_is_better is not None:
            return self.greater_is_better
        return not self.best_metric_name.endswith("loss")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    model: ModelConfig
    data: DataConfig
    training: TrainingConfig
    parallel: ParallelConfig
    # Where tokenised datasets are cached (keyed by data, tokenizer and settings, so jobs
    # may share one); None = ``<output_dir>/.cache/tokenized``. Not a JobSpec field: the
    # runner (CLI flag, Ray worker) chooses it.
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.model.is_classification:
            _require(self.data.label_field is not None, f"{self.model.task} needs label_field")
        _require(
            not self.data.packing or self.model.task == "causal-lm",
            "data.packing applies to causal-lm only; set packing: false",
        )

    @property
    def output_dir(self) -> Path:
        return Path(self.training.output_dir or "shunter-output")

    @property
    def tokenized_cache(self) -> Path:
        return self.cache_dir or self.output_dir / ".cache" / "tokenized"

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> TrainConfig:
        """Build from a JobSpec dict; unknown keys in the read sections raise ``ConfigError``."""
        model = dict(spec.get("model") or {})
        data = dict(spec.get("data") or {})
        training = dict(spec.get("training") or {})
        lora = model.pop("lora", None)
        model_cfg = _build(
            ModelConfig,
            model,
            "model",
            lora=None if lora is None else _build(LoraConfig, dict(lora), "model.lora"),
        )
        _require("train" in data, "data.train is required")
        eval_src = data.pop("eval", None)
        data_cfg = _build(
            DataConfig,
            data,
            "data",
            train=_build(DataSource, dict(data.pop("train")), "data.train"),
            eval=None if eval_src is None else _build(DataSource, dict(eval_src), "data.eval"),
        )
        training_cfg = _build(TrainingConfig, training, "training")
        parallel = ParallelConfig.from_spec(dict(spec.get("distributed") or {}), training)
        return cls(model=model_cfg, data=data_cfg, training=training_cfg, parallel=parallel)


_T = TypeVar("_T")


def _build(kind: type[_T], values: dict[str, Any], section: str, **given: Any) -> _T:
    """``kind(**values)``, raising ``ConfigError`` with a did-you-mean for unknown keys."""
    known = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown key {section}.{key}{hint}")
    # A resolved spec spells unset options as null: null means "the default" here, except
    # label_field, where null means "no labels" (LM tasks).
    values = {k: v for k, v in values.items() if v is not None or k == "label_field"}
    values.update(given)
    try:
        return kind(**values)
    except TypeError as exc:  # a wrong type that the dataclass could not take
        raise ConfigError(f"{section}: {exc}") from exc
