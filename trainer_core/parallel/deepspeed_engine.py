"""DeepSpeed ZeRO 0-3 behind the Engine verbs.

DeepSpeed owns backward, gradient reduction, clipping and the optimizer step, so this engine
hands those verbs over to ``deepspeed.DeepSpeedEngine``. The config comes from
``deepspeed_config`` (ours, the user's pass-through merged over it, ``"auto"`` filled).

Accumulation: DeepSpeed's config carries the spec's ``gradient_accumulation_steps`` (so its
``train_batch_size`` identity holds and a user's config that says the same is accepted), but
the loop owns the window, whose last one may be short: ``no_sync()`` marks non-final
micro-steps with ``set_gradient_accumulation_boundary(False)``, which defers the all-reduce
(stage 0/1) or the optimizer-step bookkeeping (stage 2/3, whose gradients are
reduce-scattered every backward into partitioned buffers), and ``step()`` runs once per window.
``backward`` passes ``scale_wrt_gas=False``: the loop already normalised the loss by the
window's global target count, exactly as for the torch engines. ``DeepSpeedEngine.no_sync``
itself refuses ZeRO 2/3, hence the boundary flag.

The optimizer is the caller's torch optimizer (``make_optimizer``), never a DeepSpeed fused
op: those JIT-compile C++/CUDA on first use. ``engine.optimizer`` is that torch optimizer, so
an LR scheduler built on it drives DeepSpeed's step (ZeRO reads its ``param_groups``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from shunter.jobspec.deepspeed import TrainingValues, deepspeed_config
from trainer_core.fetch import CheckpointFiles
from trainer_core.manifest import MANIFEST, parse_manifest
from trainer_core.parallel.config import ParallelConfig
from trainer_core.parallel.grad_norm import clip_grad_norm

__all__ = ["DeepSpeedEngine", "build_deepspeed"]

_TAG = "deepspeed"


def build_deepspeed(
    model: nn.Module,
    cfg: ParallelConfig,
    *,
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer],
    device: torch.device,
    training: TrainingValues | None = None,
) -> DeepSpeedEngine:
    os.environ.setdefault("DS_BUILD_OPS", "0")
    import deepspeed  # deferred: importing it probes the accelerator and is slow

    if device.type == "cpu":
        _use_cpu_without_jit(deepspeed)
    if cfg.fp16 and device.type != "cuda":
        raise ValueError("training.fp16 needs a CUDA device; use bf16 on CPU")
    if not dist.is_initialized():
        _single_rank_group(device)
    world_size = dist.get_world_size()
    model.to(device)
    optimizer = make_optimizer(model)
    hidden = getattr(getattr(model, "config", None), "hidden_size", None)
    config = deepspeed_config(
        cfg,
        world_size=world_size,
        cuda=device.type == "cuda",
        training=training,
        hidden_size=hidden if isinstance(hidden, int) else None,
    )
    ds_engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=config, dist_init_required=False
    )
    rank = dist.get_rank() if dist.is_initialized() else 0
    return DeepSpeedEngine(
        model=ds_engine,
        unwrapped=model,
        optimizer=optimizer,
        device=device,
        dp_rank=rank,
        dp_size=world_size,
        max_grad_norm=cfg.max_grad_norm,
    )


@dataclass(kw_only=True, eq=False)
class DeepSpeedEngine:
    """See ``trainer_core.engine.Engine``. ``model`` is the ``deepspeed.DeepSpeedEngine``."""

    model: Any
    unwrapped: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    dp_rank: int
    dp_size: int
    max_grad_norm: float | None
    cp_size: int = 1  # no context parallelism under DeepSpeed (the JobSpec refuses it)

    def forward(self, **batch: Any) -> Any:
        # DeepSpeed casts the module for bf16/fp16 itself, or autocasts inside its forward
        # (mixed_precision autocast: its torch_autocast section); no autocast around it.
        return self.model(**batch)

    def backward(self, loss: torch.Tensor) -> None:
        # The loop normalised the loss over the whole window; DeepSpeed must not divide again.
        self.model.backward(loss, scale_wrt_gas=False)

    def no_sync(self) -> AbstractContextManager[None]:
        return self._deferred_boundary()

    @contextlib.contextmanager
    def _deferred_boundary(self) -> Iterator[None]:
        self.model.set_gradient_accumulation_boundary(False)
        try:
            yield
        finally:
            self.model.set_gradient_accumulation_boundary(True)

    def clip_and_step(
        self, max_grad_norm: float | None, skip: Callable[[torch.Tensor], bool] | None = None
    ) -> torch.Tensor:
        if max_grad_norm != self.max_grad_norm:
            raise ValueError(
                f"DeepSpeed fixes gradient_clipping={self.max_grad_norm} at construction; "
                f"clip_and_step got {max_grad_norm}. Build the engine with the same max_grad_norm."
            )
        own_norm = None
        if self.model.zero_optimization_stage() == 0 and not (
            self.model.bfloat16_enabled() or self.model.fp16_enabled()
        ):
            # Plain data parallel: DeepSpeed clips but discards the norm; grads are full here.
            own_norm = clip_grad_norm(self.unwrapped.parameters(), None)
        # The divergence guard sees the norm only where we computed it before the step; under
        # ZeRO/mixed precision DeepSpeed computes it inside step(), so the guard judges the
        # loss alone there (DeepSpeed's own fp16 scaler still skips overflowing steps).
        if skip is not None and skip(own_norm if own_norm is not None else torch.zeros(())):
            self.model.zero_grad()  # skipped: no optimizer step, gradients dropped
            return own_norm if own_norm is not None else torch.tensor(float("nan"))
        self.model.step()  # clips, steps, zeroes grads
        if own_norm is not None:
            return own_norm
        # DeepSpeed syncs to host internally to compute this; it hands back a float.
        norm = self.model.get_global_grad_norm()
        return torch.tensor(float("nan") if norm is None else float(norm))

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.dp_size == 1:
            return t
        out = t.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def save(self, directory: Path) -> None:
        # Every rank writes its ZeRO partition; rank 0 also the module weights.
        self.model.save_checkpoint(str(directory), tag=_TAG, save_latest=False)

    def load(self, directory: Path, files: CheckpointFiles | None = None) -> None:
        with _fetching(self.model, directory, files):
            path, _ = self.model.load_checkpoint(
                str(directory), tag=_TAG, load_optimizer_states=True, load_lr_scheduler_states=False
            )
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint under {directory}/{_TAG}")

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        from deepspeed.utils import safe_get_full_fp32_param

        # Collective under ZeRO: every rank walks the same keys in the same order.
        full: dict[str, torch.Tensor] = {}
        seen: dict[int, torch.Tensor] = {}
        for name, t in self.unwrapped.state_dict(keep_vars=True).items():
            if isinstance(t, nn.Parameter):
                if id(t) not in seen:
                    hp = safe_get_full_fp32_param(t)  # the fp32 master of a trained param
                    seen[id(t)] = _gathered(t) if hp is None else hp.detach().cpu()
                full[name] = seen[id(t)]
            else:
                full[name] = t.detach().cpu()
        return full if dist.get_rank() == 0 else {}


@contextlib.contextmanager
def _fetching(ds: Any, directory: Path, files: CheckpointFiles | None) -> Iterator[None]:
    """While DeepSpeed loads from ``directory``, each file it reads is fetched first.

    It reads them all through its checkpoint engine (``checkpoint_engine.load``): the model
    states, and the ZeRO partition of this rank only (its optimizer refuses another world
    size). But it finds the model-states files by globbing the directory before it reads, so
    the ones its glob would match (DeepSpeed's own pattern: ``mp_rank_*`` files, or under
    ZeRO-3 this rank's ``zero_pp_rank_<r>_mp_rank_*``; ``_get_ckpt_name``, 0.19.8) are fetched
    before it looks."""
    if files is None:
        yield
        return
    pattern = ds._get_ckpt_name(str(directory), _TAG, mp_placeholder="*")
    for rel in parse_manifest((directory / MANIFEST).read_text()):
        if fnmatch.fnmatchcase(str(directory / rel), pattern):
            files.fetch(rel)
    inner = ds.checkpoint_engine
    ds.checkpoint_engine = _FetchFirst(inner, directory, files)
    try:
        yield
    finally:
        ds.checkpoint_engine = inner


class _FetchFirst:
    """DeepSpeed's checkpoint engine, fetching each file before it loads it."""

    def __init__(self, inner: Any, directory: Path, files: CheckpointFiles) -> None:
        self._inner, self._directory, self._files = inner, directory, files

    def load(self, path: str, *args: Any, **kwargs: Any) -> Any:
        self._files.fetch(os.path.relpath(path, self._directory))
        return self._inner.load(path, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _gathered(param: nn.Parameter) -> torch.Tensor:
    """A parameter with no optimizer master (frozen: LoRA's base weights), whole on CPU.
    Under ZeRO-3 each rank holds a slice, so gather it first (a collective on every rank)."""
    if not hasattr(param, "ds_id"):
        return param.detach().cpu()
    import deepspeed  # already imported by build_deepspeed: a dict lookup

    with deepspeed.zero.GatheredParameters([param]):
        return param.detach().clone().cpu()


def _single_rank_group(device: torch.device) -> None:
    """DeepSpeed always talks through torch.distributed; a lone process (``python -m
    trainer_core`` without torchrun) gets a 1-rank group on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def _use_cpu_without_jit(deepspeed: Any) -> None:
    """CPU accelerator, and no JIT-compiled shared-memory comm op.

    On CPU, DeepSpeed's comm backend JIT-compiles ``deepspeed_shm_comm`` (about a minute of
    C++ build on first use) when its op table says the op is compatible. Marking it
    incompatible makes DeepSpeed fall back to plain ``torch.distributed`` (gloo), which is
    what we run on anyway. The op table (``deepspeed.ops.__compatible_ops__``) is built on
    first access by probing every op with a compiler (tens of seconds); it is only read for
    this op (0.19.8: ``deepspeed/comm/torch.py``), so we seed it rather than probe.
    """
    if deepspeed.get_accelerator().device_name() != "cpu":
        from deepspeed.accelerator import set_accelerator
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

        set_accelerator(CPU_Accelerator())
    # Read lazily by DeepSpeed; probing it runs a compiler per op, so seed it instead.
    vars(deepspeed.ops).setdefault("__compatible_ops__", {})["deepspeed_shm_comm"] = False
