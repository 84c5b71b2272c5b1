"""What the training loop carries: ``State`` (what a checkpoint restores besides the engine,
scheduler and RNG) and ``Run`` (what set-up builds, fixed for the whole run)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from trainer_core.config import TrainConfig, TrainingConfig
from trainer_core.data import BatchOrder
from trainer_core.engine import Engine
from trainer_core.row_order import RowOrder
from trainer_core.streaming import StreamOrder
from trainer_core.tasks import TaskOps
from trainer_core.tasks.base import Collator

__all__ = ["Run", "State"]


@dataclass(kw_only=True)
class State:
    """Everything besides engine/scheduler/RNG that a checkpoint must restore."""

    step: int = 0
    epoch: int = 0  # data position of the next micro-batch
    batch: int = 0  # a batch index; a row in an elastic run (``RowOrder``)
    best_metric: float | None = None
    best_step: int | None = None
    bad_evals: int = 0  # evals since the best one (early stopping)
    world_size: int = 1
    rollbacks: int = 0  # divergence rollbacks so far (trainer_core.health); seed offset too
    # Rows one batch index covers over all data-parallel ranks (dp x per-device batch) when
    # saved, 1 in an elastic run (positions are rows); 0: not recorded (older checkpoints).
    # A resume on another width rebases on it.
    rows_per_batch: int = 0


@dataclass(frozen=True, kw_only=True)
class Run:
    """What ``_setup`` builds, fixed for the whole run: the model in its engine, the data,
    the task's functions and the schedule."""

    cfg: TrainConfig
    ops: TaskOps
    tokenizer: Any
    engine: Engine
    optimizer: torch.optim.Optimizer  # the torch optimizer the scheduler drives
    scheduler: Any
    train_ds: Any
    eval_ds: Any | None
    collate: Collator
    generator: torch.Generator | None  # the collator's random stream (masked LM), checkpointed
    order: BatchOrder | StreamOrder | RowOrder
    total_steps: int
    num_epochs: int | None  # None: the stream runs until total_steps (max_steps)

    @property
    def tc(self) -> TrainingConfig:
        return self.cfg.training

    def stream(self, state: State) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, batch, indices) of the micro-batches from ``state``'s data position."""
        return self.order.iterate(state.epoch, state.batch, self.num_epochs)
