"""One optimizer step of the loop (``train_step``): collate the window, count its targets
over the data-parallel ranks, forward and backward each micro-batch (or the pipeline
schedule over the window, or the context-parallel step over sequence shards), then clip and
step. The numerics are ``trainer_core.loop``'s contract (its module docstring)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import torch

from trainer_core.config import clip_norm
from trainer_core.health import DivergenceGuard
from trainer_core.meter import Meter
from trainer_core.parallel.context import cp_forward_backward
from trainer_core.parallel.pipeline import PipelineEngine, window_tensors
from trainer_core.parallel.torch_engine import TorchEngine
from trainer_core.run_state import Run
from trainer_core.step_timing import StepTimer
from trainer_core.tasks.base import cross_entropy_loss

__all__ = ["batch_tokens", "dataset_rows", "train_step"]

# Context parallel: labels are shifted before the sequence is split (parallel.context).
_CP_LOSS = cross_entropy_loss(shift=False)


def train_step(
    run: Run, window: list[list[int]], meter: Meter, guard: DivergenceGuard, timer: StepTimer
) -> bool:
    """One optimizer step over ``window``; True when the divergence guard skipped it."""
    engine, ops = run.engine, run.ops
    # Collate the whole window first: its global target count normalises every micro-step.
    batches = [run.collate(dataset_rows(run.train_ds, indices)) for indices in window]
    local_count = sum(ops.target_count(b["labels"]) for b in batches)  # CPU ints: no sync
    count = torch.tensor(float(local_count), device=engine.device)
    # Collective, stays on device; the cp ranks of a dp rank hold the same rows (counted once).
    global_count = (engine.reduce_sum(count) / engine.cp_size).clamp_(min=1.0)
    # DDP/FSDP average grads over the dp (x cp) ranks; undo that.
    scale = engine.dp_size * engine.cp_size / global_count
    if isinstance(engine, PipelineEngine):  # a schedule runs the window through every stage
        loss_sum = _pipeline_window(run, engine, batches, scale, timer)
    else:
        loss_sum = _micro_steps(run, batches, scale, timer)
    gate = None
    if guard.enabled:  # the global mean loss (one small all-reduce, stays on the device)
        gate = guard.gate(engine.reduce_sum(loss_sum) / global_count)
    grad_norm = engine.clip_and_step(clip_norm(run.tc), skip=gate)
    if gate is not None and guard.last is not None and guard.last.skip:
        return True  # the meter keeps good steps only: a NaN would poison the logged mean
    samples = sum(len(ix) for ix in window)
    tokens = sum(batch_tokens(b) for b in batches)
    meter.add(loss_sum / global_count, grad_norm, samples=samples, tokens=tokens)
    return False


def _micro_steps(
    run: Run, batches: list[dict[str, torch.Tensor]], scale: torch.Tensor, timer: StepTimer
) -> torch.Tensor:
    """Forward and backward of each micro-batch, gradient sync on the last only; returns this
    rank's summed loss over the window."""
    engine = run.engine
    loss_sum = torch.zeros((), device=engine.device)
    for i, batch in enumerate(batches):
        final = i == len(batches) - 1
        with contextlib.nullcontext() if final else engine.no_sync():
            if isinstance(engine, TorchEngine) and engine.cp_mesh is not None:
                summed = cp_forward_backward(
                    engine, batch, scale, lambda out, y: _CP_LOSS(out, y, run.tc)[0], timer.compute
                )
            else:
                batch = {k: v.to(engine.device, non_blocking=True) for k, v in batch.items()}
                labels = batch.pop("labels")
                with timer.compute():
                    summed, _ = run.ops.loss(engine.forward(**batch), labels, run.tc)
                engine.backward(summed * scale)
        loss_sum += summed.detach()
    return loss_sum


def _pipeline_window(
    run: Run,
    engine: PipelineEngine,
    batches: list[dict[str, torch.Tensor]],
    scale: torch.Tensor,
    timer: StepTimer,
) -> torch.Tensor:
    """The window through the pipeline schedule as one fixed-shape tensor (rows x
    ``data.max_length``), the task's summed loss at the last stage: the same gradient and
    summed loss as ``_micro_steps``."""
    tc = run.tc
    ids, labels = window_tensors(
        batches,
        rows=tc.per_device_train_batch_size * tc.gradient_accumulation_steps,
        length=run.cfg.data.max_length,
    )

    def summed(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return run.ops.loss(SimpleNamespace(logits=logits), target, tc)[0]

    with timer.compute():
        return engine.window_step(ids, labels, summed, scale)


def dataset_rows(ds: Any, indices: list[int]) -> list[dict[str, Any]]:
    cols = ds[indices]  # one Arrow slice for the batch instead of one lookup per row
    return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]


def batch_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Input tokens of a batch (CPU tensors: no sync); packed chat rows have no mask."""
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else batch["input_ids"].numel()
