"""``build_engine``: apply the parallel strategy in one place, in one fixed order.

Order (torchtitan's ``parallelize``): mesh -> tensor parallel -> (activation checkpointing,
already enabled on the HF model by the loop) -> FSDP per block, then root / or DDP -> the
optimizer over the wrapped parameters. DeepSpeed owns wrapping and the optimizer step, so it
branches off first.

Meshes (``_meshes``, shaped by the pure ``mesh.mesh_dims``): one device mesh
``dp_replicate x dp_shard x tp``. ``tp`` with ``tensor_parallel_size < world_size`` is 2-D:
TP inside each group of adjacent ranks, replicated across groups (data sharded by the
data-parallel rank, not the global one); ``fsdp+tp`` shards across groups by
``fsdp.sharding`` (all four modes, ``hybrid_shard`` and ``no_shard`` as a 3-D mesh).
Pipeline parallelism (``pipeline_parallel_size > 1``, strategy ddp) is its own ``dp x pp``
mesh and engine (``pipeline.build_pipeline``). Context parallelism
(``context_parallel_size > 1``, strategy ddp or fsdp) is a ``dp x cp`` mesh with gradients
reduced over the flattened ``dp_cp`` group (``context.py``); with fsdp+tp it is one
``dp x cp x tp`` mesh (TP on ``tp``, FSDP2 over ``dp_cp``). World-size rules
(``mesh.check_world``) are asserted here, where the world is known; the JobSpec rejects the
same cases at submit.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel

from shunter.jobspec.deepspeed import TrainingValues
from trainer_core.engine import Engine
from trainer_core.parallel.config import ParallelConfig
from trainer_core.parallel.context import cp_meshes
from trainer_core.parallel.deepspeed_engine import build_deepspeed
from trainer_core.parallel.fsdp import apply_fsdp
from trainer_core.parallel.mesh import check_device, check_world, mesh_dims
from trainer_core.parallel.pipeline import build_pipeline
from trainer_core.parallel.torch_engine import TorchEngine
from trainer_core.parallel.tp import apply_tp

__all__ = ["build_engine"]


def build_engine(
    model: nn.Module,
    cfg: ParallelConfig,
    *,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    device: torch.device,
    training: TrainingValues | None = None,
) -> Engine:
    """Wrap ``model`` for ``cfg.strategy`` over the default process group and return the
    engine; ``make_optimizer`` is called once, on the wrapped model. Every rank must build
    the same model from the same seed before calling this. ``training``: the values a
    DeepSpeed config's ``"auto"`` stands for (accumulation, optimizer, schedule)."""
    check_device(cfg, device.type)
    if cfg.strategy == "deepspeed":
        return build_deepspeed(
            model, cfg, make_optimizer=make_optimizer, device=device, training=training
        )
    grouped = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if grouped else 1
    rank = dist.get_rank() if grouped else 0
    if cfg.context_parallel_size > 1:
        return _build_context_parallel(model, cfg, make_optimizer, device, grouped=grouped)
    if cfg.pipeline_parallel_size > 1:
        if not grouped or cfg.strategy != "ddp":
            raise ValueError(
                "pipeline_parallel_size > 1 needs strategy ddp over a process group "
                f"(got strategy {cfg.strategy!r}, {world} process(es))"
            )
        return build_pipeline(
            model,
            cfg,
            make_optimizer=make_optimizer,
            device=device,
            autocast_dtype=_autocast_dtype(cfg),
        )
    unwrapped = model
    model.to(device)

    if not grouped or (world == 1 and cfg.strategy == "ddp"):
        check_world(cfg, world)
        return _torch_engine(model, unwrapped, cfg, make_optimizer, device, distributed=grouped)

    if cfg.strategy == "ddp":
        # gradient_as_bucket_view: grads are views into DDP's all-reduce buckets rather than a
        # second copy, so gradient memory is 1x (what the dry-run plan counts), not 2x.
        ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            gradient_as_bucket_view=True,
        )
        return _torch_engine(
            ddp,
            unwrapped,
            cfg,
            make_optimizer,
            device,
            dp_rank=rank,
            dp_size=world,
            no_sync_factory=ddp.no_sync,
            distributed=True,
        )

    # --- meshes -----------------------------------------------------------------------
    check_world(cfg, world)
    tp_mesh, fsdp_mesh, dp_mesh = _meshes(cfg, device, world)
    dp_rank, dp_size, dp_group = 0, 1, None
    if dp_mesh is not None:
        dp_rank, dp_size, dp_group = dp_mesh.get_local_rank(), dp_mesh.size(), dp_mesh.get_group()

    # --- 1. tensor parallel -> 2. (activation checkpointing: set by the loop) -> 3. FSDP ---
    if tp_mesh is not None:
        apply_tp(model, tp_mesh)
    if fsdp_mesh is not None:
        apply_fsdp(model, fsdp_mesh, cfg)
    fsdp = fsdp_mesh is not None
    return _torch_engine(
        model,
        unwrapped,
        cfg,
        make_optimizer,
        device,
        fsdp=fsdp,
        sharded_grads=True,
        dp_rank=dp_rank,
        dp_size=dp_size,
        dp_group=dp_group,
        no_sync_factory=(lambda: _fsdp_no_sync(model)) if fsdp else contextlib.nullcontext,
        distributed=True,
    )


def _build_context_parallel(
    model: nn.Module,
    cfg: ParallelConfig,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    device: torch.device,
    *,
    grouped: bool,
) -> Engine:
    """A ``dp x cp`` mesh (``context.cp_meshes``); DDP over the flattened ``dp_cp`` group, or
    FSDP2 sharded over the ``dp_cp`` mesh (torchtitan's ``dp_shard_cp``). Under fsdp+tp the
    mesh is ``dp x cp x tp``: the TP plan on ``tp`` first, then FSDP2 over ``dp_cp``."""
    if not grouped or cfg.strategy not in ("ddp", "fsdp", "fsdp+tp"):
        raise ValueError(
            "context_parallel_size > 1 needs strategy ddp, fsdp or fsdp+tp over a process "
            f"group (got strategy {cfg.strategy!r})"
        )
    sharded = cfg.strategy != "ddp"
    if sharded and cfg.fsdp_sharding not in ("full_shard", "shard_grad_op"):
        raise ValueError(
            f"context parallelism shards FSDP over dp x cp: fsdp.sharding {cfg.fsdp_sharding!r} "
            "is not supported with it; use full_shard or shard_grad_op"
        )
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if attention != "sdpa":
        raise ValueError(
            "context parallelism replaces torch's scaled_dot_product_attention with ring "
            f"attention; this model's attention is {attention!r}, not 'sdpa'"
        )
    world = dist.get_world_size()
    check_world(cfg, world)
    meshes = cp_meshes(device.type, mesh_dims(cfg, world, local_world=world))
    unwrapped = model
    model.to(device)
    if cfg.strategy == "ddp":
        ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            process_group=meshes.dp_cp.get_group(),
            gradient_as_bucket_view=True,
        )
        wrapped: nn.Module = ddp
        no_sync: Callable[[], contextlib.AbstractContextManager[None]] = ddp.no_sync
    else:
        if meshes.tp is not None:  # 1. tensor parallel -> 3. FSDP (as _meshes' order)
            apply_tp(model, meshes.tp)
        apply_fsdp(model, meshes.dp_cp, cfg)
        wrapped = model
        no_sync = lambda: _fsdp_no_sync(model)  # noqa: E731
    return _torch_engine(
        wrapped,
        unwrapped,
        cfg,
        make_optimizer,
        device,
        fsdp=sharded,
        sharded_grads=sharded,
        dp_rank=meshes.dp.get_local_rank(),
        dp_size=meshes.dp.size(),
        dp_group=meshes.dp_cp.get_group(),
        no_sync_factory=no_sync,
        distributed=True,
        cp_mesh=meshes.cp,
    )


def _torch_engine(
    wrapped: nn.Module,
    unwrapped: nn.Module,
    cfg: ParallelConfig,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    device: torch.device,
    *,
    fsdp: bool = False,
    sharded_grads: bool = False,
    **layout: Any,
) -> TorchEngine:
    """The engine over a wrapped model: the optimizer made once, over the wrapped parameters;
    autocast by the precision, unless FSDP's mixed precision ``"params"`` (its
    MixedPrecisionPolicy) casts the parameters instead; fp16's grad scaler, the sharded one
    where gradients are sharded. ``layout``: the data-parallel fields (rank, size, group,
    no_sync, cp_mesh, distributed)."""
    params_cast = fsdp and cfg.fsdp_mixed_precision == "params"
    return TorchEngine(
        model=wrapped,
        unwrapped=unwrapped,
        optimizer=make_optimizer(wrapped),
        device=device,
        autocast_dtype=None if params_cast else _autocast_dtype(cfg),
        scaler=_scaler(cfg, sharded=sharded_grads),
        **layout,
    )


def _meshes(
    cfg: ParallelConfig, device: torch.device, world: int
) -> tuple[DeviceMesh | None, DeviceMesh | None, DeviceMesh | None]:
    """(TP mesh, FSDP mesh, flat data-parallel mesh); ``None`` where a part is absent.

    The dims are ``mesh_dims``'s (``LOCAL_WORLD_SIZE``: the default hybrid shard group).
    """
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    dims = mesh_dims(cfg, world, local_world=local_world)
    tp = dict(dims).get("tp", 1)
    if not dims:
        return None, None, None
    mesh = init_device_mesh(
        device.type, tuple(n for _, n in dims), mesh_dim_names=tuple(name for name, _ in dims)
    )
    dp_names = tuple(name for name, _ in dims if name != "tp")
    tp_mesh = mesh["tp"] if tp > 1 else None
    if not dp_names:
        return tp_mesh, None, None
    fsdp_mesh = mesh[dp_names] if len(dp_names) > 1 else mesh[dp_names[0]]
    dp_mesh = fsdp_mesh._flatten("dp") if len(dp_names) > 1 else fsdp_mesh
    return tp_mesh, fsdp_mesh, dp_mesh


@contextlib.contextmanager
def _fsdp_no_sync(model: nn.Module) -> Iterator[None]:
    assert isinstance(model, FSDPModule)
    # Gradients accumulate unsharded locally; the next synced backward reduce-scatters them.
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _autocast_dtype(cfg: ParallelConfig) -> torch.dtype | None:
    if cfg.bf16:
        return torch.bfloat16
    if cfg.fp16:
        return torch.float16
    return None


def _scaler(cfg: ParallelConfig, *, sharded: bool) -> object | None:
    if not cfg.fp16:
        return None
    if sharded:
        # Sharded grads: found-inf must be agreed across ranks, which this scaler all-reduces.
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler()
    return torch.amp.GradScaler("cuda")
