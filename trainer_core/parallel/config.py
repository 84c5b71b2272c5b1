"""``ParallelConfig``: what ``build_engine`` needs, projected from a ``JobSpec``.

The fields, their meanings, defaults and rules are the JobSpec's (``distributed`` plus the
``training`` values a backend bakes in at construction: precision, clipping, micro-batch).
``from_spec`` copies them; nothing is checked here, as ``shunter.jobspec`` already did. The
keyword defaults (for the bench and the strategy tests, which build one by hand) are read
from the JobSpec's own defaults, never written twice. ``build_engine`` asserts only what the
spec cannot know: the real world size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shunter.jobspec import DistributedSpec, JobSpec, TrainingSpec
from shunter.jobspec.spec import (
    DeepSpeedStage,
    FsdpMixedPrecision,
    FsdpSharding,
    PipelineSchedule,
    Strategy,
)

__all__ = ["DeepSpeedStage", "FsdpMixedPrecision", "FsdpSharding", "ParallelConfig", "Strategy"]

_D = DistributedSpec()
_T = TrainingSpec()


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    """How the model is spread over the ranks (JobSpec names, flattened).

    ``hybrid_shard_size``: ranks per FSDP shard group under ``hybrid_shard``; ``None`` = the
    node-local ranks (``LOCAL_WORLD_SIZE``), as torch and HF do. ``deepspeed_config``: the
    spec's DeepSpeed config, merged (recursively) over the one built from these fields.
    ``max_grad_norm`` (``None`` = no clipping) and ``micro_batch_size`` are read by DeepSpeed,
    which needs them at construction. ``pipeline_microbatches``: the spec's, or its
    ``gradient_accumulation_steps`` when null.
    """

    strategy: Strategy = _D.strategy
    fsdp_sharding: FsdpSharding = _D.fsdp.sharding
    fsdp_cpu_offload: bool = _D.fsdp.cpu_offload
    fsdp_mixed_precision: FsdpMixedPrecision = _D.fsdp.mixed_precision
    hybrid_shard_size: int | None = _D.fsdp.hybrid_shard_size
    deepspeed_stage: DeepSpeedStage = _D.deepspeed.stage
    offload_optimizer: bool = _D.deepspeed.offload_optimizer
    offload_param: bool = _D.deepspeed.offload_param
    deepspeed_mixed_precision: FsdpMixedPrecision = _D.deepspeed.mixed_precision
    deepspeed_config: Mapping[str, Any] | None = field(default=None, compare=False)
    tensor_parallel_size: int = _D.tensor_parallel_size
    pipeline_parallel_size: int = _D.pipeline_parallel_size
    pipeline_schedule: PipelineSchedule = _D.pipeline_schedule
    pipeline_microbatches: int = _T.gradient_accumulation_steps
    context_parallel_size: int = _D.context_parallel_size
    bf16: bool = _T.bf16
    fp16: bool = _T.fp16
    max_grad_norm: float | None = _T.max_grad_norm or None
    micro_batch_size: int = _T.per_device_train_batch_size

    @classmethod
    def from_spec(cls, spec: JobSpec) -> ParallelConfig:
        """The projection of a validated spec (0 = no clipping becomes ``None``)."""
        d, t = spec.distributed, spec.training
        return cls(
            strategy=d.strategy,
            fsdp_sharding=d.fsdp.sharding,
            fsdp_cpu_offload=d.fsdp.cpu_offload,
            fsdp_mixed_precision=d.fsdp.mixed_precision,
            hybrid_shard_size=d.fsdp.hybrid_shard_size,
            deepspeed_stage=d.deepspeed.stage,
            offload_optimizer=d.deepspeed.offload_optimizer,
            offload_param=d.deepspeed.offload_param,
            deepspeed_mixed_precision=d.deepspeed.mixed_precision,
            deepspeed_config=d.deepspeed.config,
            tensor_parallel_size=d.tensor_parallel_size,
            pipeline_parallel_size=d.pipeline_parallel_size,
            pipeline_schedule=d.pipeline_schedule,
            pipeline_microbatches=d.pipeline_microbatches or t.gradient_accumulation_steps,
            context_parallel_size=d.context_parallel_size,
            bf16=t.bf16,
            fp16=t.fp16,
            max_grad_norm=t.max_grad_norm or None,
            micro_batch_size=t.per_device_train_batch_size,
        )
