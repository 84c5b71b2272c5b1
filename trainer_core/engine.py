"""The one seam between the training loop and the parallelism backend.

The loop (``trainer_core.loop``) only ever calls these verbs, so it never branches on the
strategy. ``trainer_core.parallel.build_engine`` applies the strategy (DDP, FSDP2, DeepSpeed
ZeRO, DTensor TP, FSDP2+TP, or a single process) in one place and returns an ``Engine``.

Contract (every implementation):
- ``model`` is the wrapped module to call for forward; ``unwrapped`` the HF model underneath.
- ``forward(**batch)`` runs the model under the configured autocast.
- ``backward(loss)`` accumulates gradients (scaled for fp16; DeepSpeed's own backward).
  Across data-parallel ranks gradients are *averaged* (DDP, FSDP2 and DeepSpeed all divide by
  ``dp_size``), so for a loss normalised by a global count multiply by ``dp_size``.
- ``no_sync()`` is a context manager entered for non-final micro-steps of an accumulation
  window: no gradient all-reduce / reduce-scatter happens inside it.
- ``clip_and_step(max_grad_norm)`` unscales (fp16), clips the global grad norm across all
  shards/ranks, steps the optimizer, zeroes grads, and returns the pre-clip total norm as a
  0-dim tensor (no host sync inside). The LR scheduler is stepped by the loop, not here.
  With ``skip`` (the divergence guard), ``skip(norm)`` is asked after the norm is known and
  before the step: True drops the gradients and leaves parameters and optimizer state as
  they were (DeepSpeed under ZeRO/mixed precision passes a zero norm: the loss alone decides).
- ``save(dir)`` / ``load(dir)`` write and read model + optimizer (+ grad scaler) state; sharded
  backends use ``torch.distributed.checkpoint`` so a resume may change world size where the
  strategy allows. Every rank calls both. Scheduler, RNG, data position and step are the
  checkpoint module's job, not the engine's. ``load(dir, files=...)``: the checkpoint is not
  all on this node (``trainer_core.fetch``); fetch through ``files`` exactly what the load
  reads, just before reading it.
- ``dp_rank`` / ``dp_size``: this rank's place in the data-parallel dimension (TP ranks of one
  group share data); the data sampler shards by these. ``reduce_sum(t)`` all-reduces a tensor
  (e.g. the target-token count of an accumulation window) over the data-parallel group.
- ``cp_size``: ranks splitting each sequence (context parallel; 1 without). They read the
  same rows; ``reduce_sum`` and the gradient average run over ``dp_size x cp_size`` ranks.
- ``optimizer`` is the torch optimizer ``make_optimizer`` returned (for DeepSpeed too, whose
  ZeRO wrapper reads its ``param_groups``), so an LR scheduler built on it drives every backend.
- ``full_state_dict()`` gathers a full, unsharded CPU state dict on rank 0 (other ranks get {})
  for ``save_pretrained``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import torch

from trainer_core.fetch import CheckpointFiles

__all__ = ["Engine"]


class Engine(Protocol):
    model: torch.nn.Module
    unwrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    dp_rank: int
    dp_size: int

    @property
    def cp_size(self) -> int: ...

    def forward(self, **batch: Any) -> Any: ...
    def backward(self, loss: torch.Tensor) -> None: ...
    def no_sync(self) -> AbstractContextManager[None]: ...
    def clip_and_step(
        self, max_grad_norm: float | None, skip: Callable[[torch.Tensor], bool] | None = None
    ) -> torch.Tensor: ...
    def save(self, directory: Path) -> None: ...
    def load(self, directory: Path, files: CheckpointFiles | None = None) -> None: ...
    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor: ...
    def full_state_dict(self) -> dict[str, torch.Tensor]: ...
