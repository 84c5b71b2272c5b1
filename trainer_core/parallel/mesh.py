"""The shape of a run before any process starts: the world-size rules and the device mesh's
dimensions for a ``ParallelConfig``.

Pure (no torch, no process group) so a spec can be checked against what ``build_engine``
will build without starting anything (``tests/jobspec/test_parity_property.py``);
``build_engine`` calls the same functions.
"""

from __future__ import annotations

from trainer_core.parallel.config import ParallelConfig

__all__ = ["check_device", "check_world", "mesh_dims"]


def check_device(cfg: ParallelConfig, device_type: str) -> None:
    """fp16 needs a grad scaler on a CUDA device."""
    if cfg.fp16 and device_type != "cuda":
        raise ValueError(
            "training.fp16 needs a CUDA device (a grad scaler on GPU); use bf16 on CPU"
        )


def check_world(cfg: ParallelConfig, world: int) -> None:
    """The tensor-parallel strategies need whole TP groups (and fsdp+tp at least two); context
    parallelism whole ``cp`` groups (whole ``tp x cp`` blocks under fsdp+tp; strategy tp has
    no data-parallel reduction for the cp ranks' gradients, so CP with TP is fsdp+tp)."""
    cp = cfg.context_parallel_size
    if cp > 1 and world % cp:
        raise ValueError(
            f"distributed.context_parallel_size ({cp}) must divide num_workers ({world})"
        )
    tp = cfg.tensor_parallel_size
    if cp > 1 and cfg.strategy == "tp":
        raise ValueError(
            "context parallelism with tensor parallelism runs under strategy fsdp+tp (FSDP "
            "over the flattened dp x cp ranks, TP on tp); set strategy: fsdp+tp"
        )
    if cp > 1 and cfg.strategy == "fsdp+tp" and world % (tp * cp):
        raise ValueError(
            f"a dp x cp x tp mesh needs num_workers ({world}) to be a multiple of "
            f"tensor_parallel_size x context_parallel_size ({tp * cp})"
        )
    if cfg.strategy in ("tp", "fsdp+tp") and world % tp:
        raise ValueError(
            f"strategy {cfg.strategy} needs num_workers ({world}) to be a multiple of "
            f"tensor_parallel_size ({tp}); pick a TP size that divides it"
        )
    if cfg.strategy == "fsdp+tp" and world // tp < 2:
        raise ValueError(
            f"strategy fsdp+tp needs num_workers a multiple of tensor_parallel_size={tp} and at "
            f"least 2x it (got {world} workers); use strategy 'tp' for a single TP group"
        )


def mesh_dims(cfg: ParallelConfig, world: int, *, local_world: int) -> list[tuple[str, int]]:
    """The mesh's (name, size) dims, outer to inner ``dp_replicate x dp_shard x tp``; size-1
    dims omitted (1-D cases stay 1-D), empty when no mesh is needed; ``dp x cp`` under
    context parallelism with ddp / fsdp, and the 3-D ``dp x cp x tp`` (every dim kept, even of
    size 1) with fsdp+tp: Hugging Face's ``examples/3D_parallel.py`` dims (dp, tp, cp) in
    torchtitan's order, tp innermost. Not HF's ``(dp, tp, cp)`` layout: there the flattened
    ``dp_cp`` is not contiguous, and torch 2.13's DTensor cannot redistribute a parameter on
    the FSDP x TP mesh ``(dp_cp, tp)`` (the grad-norm reduction raises "Mesh dim indices
    should be in ascending order").

    TP ranks are adjacent (fastest links inside a node). The data-parallel part follows
    ``fsdp.sharding``; strategy ``tp`` with more ranks than ``tensor_parallel_size``
    replicates the TP groups (FSDP2 with a shard dim of 1: whole parameters per group,
    gradients all-reduced across groups, as DDP would). ``local_world``: ranks per node
    (``LOCAL_WORLD_SIZE``), the default ``hybrid_shard`` group.
    """
    tp = cfg.tensor_parallel_size if cfg.strategy in ("tp", "fsdp+tp") else 1
    cp = cfg.context_parallel_size
    if cp > 1 and tp > 1:  # fsdp+tp: the 3-D mesh (parallel.context)
        return [("dp", world // (tp * cp)), ("cp", cp), ("tp", tp)]
    if cp > 1:  # ddp / fsdp over a dp x cp mesh (parallel.context)
        return [("dp", world // cp), ("cp", cp)]
    dp = world // tp
    if cfg.strategy == "tp":
        replicate, shard = (dp, 1) if dp > 1 else (1, 1)
    elif cfg.fsdp_sharding == "no_shard":
        replicate, shard = dp, 1
    elif cfg.fsdp_sharding == "hybrid_shard":
        # Default group: this node's data-parallel ranks (its TP ranks share one dp rank).
        shard = cfg.hybrid_shard_size or max(1, local_world // tp)
        if dp % shard:
            raise ValueError(
                f"fsdp.sharding hybrid_shard: {dp} data-parallel ranks is not a multiple of the "
                f"shard group size {shard}; set distributed.fsdp.hybrid_shard_size to a divisor"
            )
        replicate = dp // shard
    else:
        replicate, shard = 1, dp
    two_d = cfg.strategy != "tp" and cfg.fsdp_sharding in ("no_shard", "hybrid_shard")
    dims = [("dp_replicate", replicate)] if replicate > 1 or two_d else []
    # FSDP strategies keep a shard dim even of size 1 (a 1-rank group is still FSDP-wrapped).
    dims += [("dp_shard", shard)] if shard > 1 or dims or cfg.strategy != "tp" else []
    dims += [("tp", tp)] if tp > 1 else []
    return dims
