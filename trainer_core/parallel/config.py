"""Typed configuration for the parallelism strategy.

``ParallelConfig`` is what ``build_engine`` needs and nothing more. It is read from the
``distributed`` section of a JobSpec (plus the few ``training`` fields a backend must know at
construction time: precision, grad clipping and micro-batch size, which DeepSpeed bakes into
its engine). Rules that need the world size (TP size divides it, ``fsdp+tp`` needs at least
two data-parallel groups) are checked in ``build_engine``, where the world size is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

__all__ = ["DeepSpeedStage", "FsdpSharding", "ParallelConfig", "Strategy"]

Strategy = Literal["ddp", "fsdp", "deepspeed", "tp", "fsdp+tp"]
FsdpSharding = Literal["full_shard", "shard_grad_op", "hybrid_shard", "no_shard"]
DeepSpeedStage = Literal[0, 1, 2, 3]

_STRATEGIES: tuple[str, ...] = get_args(Strategy)
_SHARDINGS: tuple[str, ...] = get_args(FsdpSharding)
_FSDP_KEYS = frozenset({"sharding", "cpu_offload", "hybrid_shard_size"})
_DEEPSPEED_KEYS = frozenset({"stage", "offload_optimizer", "offload_param", "config"})
_DISTRIBUTED_KEYS = frozenset({"strategy", "fsdp", "deepspeed", "tensor_parallel_size"})


@dataclass(frozen=True, kw_only=True)
class ParallelConfig:
    """How the model is spread over the ranks.

    ``hybrid_shard_size``: ranks per FSDP shard group under ``hybrid_shard`` (parameters are
    sharded inside a group and replicated across groups); ``None`` = the node-local ranks
    (``LOCAL_WORLD_SIZE``), as torch and HF do. ``deepspeed_config``: a full DeepSpeed config
    dict merged (recursively) over the one built from these fields. ``max_grad_norm`` and
    ``micro_batch_size`` are only read by DeepSpeed, which needs them at construction.
    """

    strategy: Strategy = "ddp"
    fsdp_sharding: FsdpSharding = "full_shard"
    fsdp_cpu_offload: bool = False
    hybrid_shard_size: int | None = None
    deepspeed_stage: DeepSpeedStage = 2
    offload_optimizer: bool = False
    offload_param: bool = False
    deepspeed_config: Mapping[str, Any] | None = field(default=None, compare=False)
    tensor_parallel_size: int = 1
    bf16: bool = False
    fp16: bool = False
    max_grad_norm: float | None = 1.0
    micro_batch_size: int = 1

    def __post_init__(self) -> None:
        if self.strategy not in _STRATEGIES:
            raise ValueError(
                f"distributed.strategy={self.strategy!r} is unknown; use one of {_STRATEGIES}"
            )
        if self.fsdp_sharding not in _SHARDINGS:
            raise ValueError(
                f"distributed.fsdp.sharding={self.fsdp_sharding!r} is unknown; "
                f"use one of {_SHARDINGS}"
            )
        if self.deepspeed_stage not in (0, 1, 2, 3):
            raise ValueError(
                f"distributed.deepspeed.stage={self.deepspeed_stage!r}: use 0, 1, 2 or 3"
            )
        if self.bf16 and self.fp16:
            raise ValueError("training.bf16 and training.fp16 are both true: set at most one")
        if self.tensor_parallel_size < 1:
            raise ValueError("distributed.tensor_parallel_size must be >= 1")
        tp = self.strategy in ("tp", "fsdp+tp")
        if tp and self.tensor_parallel_size < 2:
            raise ValueError(
                f"strategy {self.strategy!r} needs distributed.tensor_parallel_size >= 2 "
                "(or use strategy 'ddp'/'fsdp' for pure data parallelism)"
            )
        if not tp and self.tensor_parallel_size != 1:
            raise ValueError(
                f"distributed.tensor_parallel_size={self.tensor_parallel_size} needs strategy "
                "'tp' or 'fsdp+tp'; set it to 1 for strategy " + repr(self.strategy)
            )
        if self.offload_param and self.deepspeed_stage != 3:
            raise ValueError(
                "distributed.deepspeed.offload_param needs stage 3; set stage: 3 or "
                "offload_param: false"
            )
        if self.offload_optimizer and self.deepspeed_stage == 0:
            raise ValueError(
                "distributed.deepspeed.offload_optimizer needs stage >= 1 (ZeRO partitions the "
                "optimizer state it offloads); set stage: 1, 2 or 3"
            )
        if self.hybrid_shard_size is not None and (
            self.fsdp_sharding != "hybrid_shard" or self.hybrid_shard_size < 1
        ):
            raise ValueError(
                "distributed.fsdp.hybrid_shard_size is only for sharding: hybrid_shard "
                "and must be >= 1"
            )
        if self.micro_batch_size < 1:
            raise ValueError("training.per_device_train_batch_size must be >= 1")
        if self.max_grad_norm is not None and self.max_grad_norm < 0:
            raise ValueError("training.max_grad_norm must be >= 0 (or null for no clipping)")

    @classmethod
    def from_spec(
        cls, distributed: Mapping[str, Any], training: Mapping[str, Any] | None = None
    ) -> ParallelConfig:
        """Read a JobSpec's ``distributed`` and ``training`` sections (DESIGN.md names and
        defaults); keys this config does not know in ``distributed`` are an error."""
        training = training or {}
        _reject_unknown("distributed", distributed, _DISTRIBUTED_KEYS)
        fsdp = distributed.get("fsdp") or {}
        deepspeed = distributed.get("deepspeed") or {}
        _reject_unknown("distributed.fsdp", fsdp, _FSDP_KEYS)
        _reject_unknown("distributed.deepspeed", deepspeed, _DEEPSPEED_KEYS)
        max_grad_norm = training.get("max_grad_norm", 1.0)
        return cls(
            strategy=cast(Strategy, distributed.get("strategy", "ddp")),
            fsdp_sharding=cast(FsdpSharding, fsdp.get("sharding", "full_shard")),
            fsdp_cpu_offload=bool(fsdp.get("cpu_offload", False)),
            hybrid_shard_size=fsdp.get("hybrid_shard_size"),
            deepspeed_stage=cast(DeepSpeedStage, int(deepspeed.get("stage", 2))),
            offload_optimizer=bool(deepspeed.get("offload_optimizer", False)),
            offload_param=bool(deepspeed.get("offload_param", False)),
            deepspeed_config=deepspeed.get("config"),
            tensor_parallel_size=int(distributed.get("tensor_parallel_size", 1)),
            bf16=bool(training.get("bf16", False)),
            fp16=bool(training.get("fp16", False)),
            max_grad_norm=None if max_grad_norm is None else float(max_grad_norm),
            micro_batch_size=int(training.get("per_device_train_batch_size", 16)),
        )


def _reject_unknown(where: str, section: Mapping[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(set(section) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(known)}")
