"""``build_engine``: apply the parallel strategy in one place, in one fixed order.

Order (torchtitan's ``parallelize``): mesh -> tensor parallel -> (activation checkpointing,
already enabled on the HF model by the loop) -> FSDP per block, then root / or DDP -> the
optimizer over the wrapped parameters. DeepSpeed owns wrapping and the optimizer step, so it
branches off first.

World-size rules (checked here because only here is the world size known): ``tp`` needs
``tensor_parallel_size == world_size`` (one TP group, data-parallel size 1); ``fsdp+tp``
needs ``world_size`` a multiple of ``tensor_parallel_size`` with at least two data-parallel
groups; ``hybrid_shard`` needs ``world_size`` a multiple of the shard group size.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel

from trainer_core.engine import Engine
from trainer_core.parallel.config import ParallelConfig
from trainer_core.parallel.deepspeed_engine import build_deepspeed
from trainer_core.parallel.fsdp import apply_fsdp
from trainer_core.parallel.torch_engine import TorchEngine
from trainer_core.parallel.tp import apply_tp

__all__ = ["build_engine"]


def build_engine(
    model: nn.Module,
    cfg: ParallelConfig,
    *,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    device: torch.device,
) -> Engine:
    """Wrap ``model`` for ``cfg.strategy`` over the default process group and return the
    engine; ``make_optimizer`` is called once, on the wrapped model. Every rank must build
    the same model from the same seed before calling this."""
    if cfg.fp16 and device.type != "cuda":
        raise ValueError(
            "training.fp16 needs a CUDA device (a grad scaler on GPU); use bf16 on CPU"
        )
    if cfg.strategy == "deepspeed":
        return build_deepspeed(model, cfg, make_optimizer=make_optimizer, device=device)
    grouped = dist.is_available() and dist.is_initialized()
    world = dist.get_world_size() if grouped else 1
    rank = dist.get_rank() if grouped else 0
    unwrapped = model
    model.to(device)
    autocast = _autocast_dtype(cfg)

    if not grouped or (world == 1 and cfg.strategy == "ddp"):
        _check_tp_world(cfg, world)
        return TorchEngine(
            model=model,
            unwrapped=unwrapped,
            optimizer=make_optimizer(model),
            device=device,
            autocast_dtype=autocast,
            scaler=_scaler(cfg, sharded=False),
            distributed=grouped,
        )

    if cfg.strategy == "ddp":
        ddp = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
        return TorchEngine(
            model=ddp,
            unwrapped=unwrapped,
            optimizer=make_optimizer(ddp),
            device=device,
            dp_rank=rank,
            dp_size=world,
            no_sync_factory=ddp.no_sync,
            autocast_dtype=autocast,
            scaler=_scaler(cfg, sharded=False),
            distributed=True,
        )

    # --- meshes -----------------------------------------------------------------------
    _check_tp_world(cfg, world)
    tp_size = cfg.tensor_parallel_size
    dp_mesh: DeviceMesh | None = None
    dp_rank, dp_size, dp_group = rank, world, None
    if cfg.strategy == "tp":
        tp_mesh: DeviceMesh | None = init_device_mesh(device.type, (world,), mesh_dim_names=("tp",))
        dp_rank, dp_size = 0, 1
    elif cfg.strategy == "fsdp+tp":
        mesh = init_device_mesh(
            device.type, (world // tp_size, tp_size), mesh_dim_names=("dp", "tp")
        )
        tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
        dp_rank, dp_size, dp_group = dp_mesh.get_local_rank(), dp_mesh.size(), dp_mesh.get_group()
    else:
        tp_mesh, dp_mesh = None, _fsdp_mesh(cfg, device, world)

    # --- 1. tensor parallel -> 2. (activation checkpointing: set by the loop) -> 3. FSDP ---
    if tp_mesh is not None:
        apply_tp(model, tp_mesh)
    if dp_mesh is not None:
        apply_fsdp(model, dp_mesh, cfg)
    fsdp = dp_mesh is not None
    return TorchEngine(
        model=model,
        unwrapped=unwrapped,
        optimizer=make_optimizer(model),
        device=device,
        dp_rank=dp_rank,
        dp_size=dp_size,
        dp_group=dp_group,
        no_sync_factory=(lambda: _fsdp_no_sync(model)) if fsdp else contextlib.nullcontext,
        # FSDP's MixedPrecisionPolicy casts parameters; autocast is for the rest.
        autocast_dtype=None if fsdp else autocast,
        scaler=_scaler(cfg, sharded=True),
        distributed=True,
    )


def _check_tp_world(cfg: ParallelConfig, world: int) -> None:
    tp = cfg.tensor_parallel_size
    if cfg.strategy == "tp" and tp != world:
        raise ValueError(
            f"strategy tp needs tensor_parallel_size == number of workers (got {tp} and "
            f"{world}); for data parallel across TP groups use strategy 'fsdp+tp'"
        )
    if cfg.strategy == "fsdp+tp" and (world % tp or world // tp < 2):
        raise ValueError(
            f"strategy fsdp+tp needs num_workers a multiple of tensor_parallel_size={tp} and at "
            f"least 2x it (got {world} workers); use strategy 'tp' for a single TP group"
        )
    if cfg.strategy == "fsdp+tp" and cfg.fsdp_sharding not in ("full_shard", "shard_grad_op"):
        raise ValueError(
            "strategy fsdp+tp supports fsdp.sharding full_shard or shard_grad_op "
            f"(got {cfg.fsdp_sharding!r})"
        )


def _fsdp_mesh(cfg: ParallelConfig, device: torch.device, world: int) -> DeviceMesh:
    names_2d = ("dp_replicate", "dp_shard")
    if cfg.fsdp_sharding == "no_shard":
        # Shard dimension of size 1: every rank keeps whole parameters, grads are all-reduced.
        return init_device_mesh(device.type, (world, 1), mesh_dim_names=names_2d)
    if cfg.fsdp_sharding == "hybrid_shard":
        shard = cfg.hybrid_shard_size or int(os.environ.get("LOCAL_WORLD_SIZE", world))
        if world % shard:
            raise ValueError(
                f"fsdp.sharding hybrid_shard: {world} workers is not a multiple of the shard "
                f"group size {shard}; set distributed.fsdp.hybrid_shard_size to a divisor"
            )
        return init_device_mesh(device.type, (world // shard, shard), mesh_dim_names=names_2d)
    return init_device_mesh(device.type, (world,), mesh_dim_names=("dp_shard",))


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
