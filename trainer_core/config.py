"""One training run's configuration: a validated ``shunter.jobspec.JobSpec`` plus runtime paths.

The JobSpec is the only definition of the fields, their defaults, bounds and rules
(``shunter.jobspec``); trainer_core reads the typed sections as they are: ``ModelSpec`` ->
``model.py``, ``DataSpec`` -> ``data.py``, ``TrainingSpec`` -> ``optim.py`` / ``loop.py`` /
``checkpoint.py``, and ``ParallelConfig.from_spec`` (its projection for ``build_engine``).
What is left here are read helpers that need torch or name trainer_core's conventions
(``torch_dtype``, ``clip_norm``, ``eval_every``, ``best_metric_key``, ``higher_is_better``)
and the runtime paths a spec does not hold (``output_dir`` for torchrun users, the
tokenised-data cache). An invalid spec raises ``shunter.jobspec.SpecError``.

The ``*Config`` names are the JobSpec sections themselves (aliases), not copies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from shunter.jobspec import (
    DataSource,
    DataSpec,
    FieldError,
    JobSpec,
    LoraSpec,
    ModelSpec,
    SpecError,
    TrainingSpec,
    validate,
)
from shunter.jobspec.rules import default_greater_is_better
from trainer_core.parallel import ParallelConfig

if TYPE_CHECKING:
    from trainer_core.shared_data import SharedData

__all__ = [
    "DataConfig",
    "DataSource",
    "LoraConfig",
    "ModelConfig",
    "TrainConfig",
    "TrainingConfig",
    "best_metric_key",
    "clip_norm",
    "eval_every",
    "higher_is_better",
    "local_spec",
    "torch_dtype",
]

# The sections trainer_core reads are the JobSpec's own models.
ModelConfig = ModelSpec
DataConfig = DataSpec
TrainingConfig = TrainingSpec
LoraConfig = LoraSpec

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(model: ModelSpec) -> torch.dtype:
    return _DTYPES[model.dtype]


def clip_norm(training: TrainingSpec) -> float | None:
    """``max_grad_norm`` as the engine takes it: ``None`` when clipping is off (0)."""
    return training.max_grad_norm or None


def eval_every(training: TrainingSpec) -> int:
    """Optimizer steps between evals for eval_strategy=steps (HF: defaults to logging)."""
    return training.eval_steps or training.logging_steps


def best_metric_key(training: TrainingSpec) -> str:
    """``metric_for_best_model`` with HF's ``eval_`` prefix, default ``eval_loss``."""
    name = training.metric_for_best_model or "loss"
    return name if name.startswith("eval_") else f"eval_{name}"


def higher_is_better(training: TrainingSpec) -> bool:
    if training.greater_is_better is not None:
        return training.greater_is_better
    return default_greater_is_better(best_metric_key(training))


def local_spec(raw: Mapping[str, Any], *, world_size: int, cuda: bool) -> JobSpec:
    """Validate a spec for a run outside the service (torchrun, tests, the bench).

    The run's own shape is the truth here: ``resources.num_workers`` is the world size and
    ``gpus_per_worker`` is 1 with CUDA, else 0 (so the spec's GPU rules see the machine).
    A missing ``name`` is ``local`` (names are the service's job names). Raises ``SpecError``.
    """
    resources = dict(raw.get("resources") or {})
    resources.update(num_workers=world_size, gpus_per_worker=1 if cuda else 0)
    return validate({"name": "local", **raw, "resources": resources}, service_mode=False)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A validated spec and where this run writes (``output_dir``) and caches tokens."""

    spec: JobSpec
    output_dir: Path
    # Where tokenised datasets are cached (keyed by data, tokenizer and settings, so jobs
    # may share one); None = ``<output_dir>/.cache/tokenized``. Not a JobSpec field: the
    # runner (CLI flag, Ray worker) chooses it.
    cache_dir: Path | None = None
    # Object storage: the runner's data plane (``trainer_core.shared_data.SharedData``): inputs read
    # through the node's cache, tokenised datasets shared by every job through the store.
    shared_data: SharedData | None = None

    @property
    def model(self) -> ModelSpec:
        return self.spec.model

    @property
    def data(self) -> DataSpec:
        return self.spec.data

    @property
    def training(self) -> TrainingSpec:
        return self.spec.training

    @property
    def parallel(self) -> ParallelConfig:
        return ParallelConfig.from_spec(self.spec)

    @property
    def tokenized_cache(self) -> Path:
        return self.cache_dir or self.output_dir / ".cache" / "tokenized"

    @classmethod
    def from_spec(
        cls,
        spec: JobSpec | Mapping[str, Any],
        *,
        output_dir: str | Path | None = None,
        cache_dir: Path | None = None,
        shared_data: SharedData | None = None,
    ) -> TrainConfig:
        """From a validated ``JobSpec``, or a mapping validated here with ``local_spec``
        (world size from ``WORLD_SIZE``, GPUs from CUDA). ``output_dir`` overrides
        ``training.output_dir``; one of them must be set."""
        if not isinstance(spec, JobSpec):
            world = int(os.environ.get("WORLD_SIZE", "1"))
            spec = local_spec(spec, world_size=world, cuda=torch.cuda.is_available())
        out = output_dir if output_dir is not None else spec.training.output_dir
        if out is None:
            raise SpecError(
                [FieldError("training.output_dir", "required to train outside the service")]
            )
        return cls(spec=spec, output_dir=Path(out), cache_dir=cache_dir, shared_data=shared_data)
