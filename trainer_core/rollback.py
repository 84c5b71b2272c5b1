"""The divergence guard's consequences in the loop: a skipped step is recorded
(``on_skip``), and after too many a rollback to the last verified checkpoint with a new seed
(``roll_back``; ``trainer_core.health`` decides)."""

from __future__ import annotations

import logging

import torch.distributed as dist

from trainer_core.checkpoint import latest_verified, load_checkpoint
from trainer_core.health import Diverged, DivergenceGuard
from trainer_core.reporter import Reporter
from trainer_core.resume_from import rank0_choice, readable_checkpoint
from trainer_core.run_state import Run, State
from trainer_core.seeding import set_seed

__all__ = ["on_skip", "roll_back"]

log = logging.getLogger("trainer_core.loop")


def on_skip(guard: DivergenceGuard, step: int, reporter: Reporter) -> bool:
    """Record a skipped step (a metric the service turns into an event); True = roll back."""
    verdict = guard.last
    assert verdict is not None
    guard.record_skip(step)
    log.warning(
        "step %d skipped (%s): loss %s, grad norm %s",
        step,
        verdict.reason,
        verdict.loss,
        verdict.grad_norm,
    )
    reporter.report(
        step,
        {
            "health_skipped_steps": float(guard.total_skips),
            "health_skipped_loss": verdict.loss,
            "health_skipped_grad_norm": verdict.grad_norm,
        },
    )
    return guard.rollback_due(step)


def roll_back(run: Run, state: State, guard: DivergenceGuard, reporter: Reporter) -> State:
    """Back to the last verified checkpoint, past the data that led here, with a new seed.
    Raises ``Diverged`` after ``max_rollbacks`` rollbacks or with no checkpoint to go to."""
    cfg, generator = run.cfg, run.generator
    spec = cfg.spec.health.divergence
    if state.rollbacks >= spec.max_rollbacks:
        raise Diverged(state.step, guard.last_finite_loss, state.rollbacks)
    target = rank0_choice(lambda: latest_verified(cfg.output_dir, reporter.checkpoint_files))
    if target is None:
        raise Diverged(state.step, guard.last_finite_loss, state.rollbacks)
    directory, files = readable_checkpoint(reporter, target)
    saved = load_checkpoint(
        directory, run.engine, scheduler=run.scheduler, generator=generator, files=files
    )
    rollbacks = state.rollbacks + 1
    # Keep the data position: the batches since the checkpoint are skipped, not replayed.
    back = State(
        **{
            **saved,
            "world_size": state.world_size,
            "epoch": state.epoch,
            "batch": state.batch,
            "rows_per_batch": state.rows_per_batch,  # the position is this run's
        }
    )
    back.rollbacks = rollbacks
    seed = cfg.training.seed + rollbacks  # dropout, masking: not the same draws again
    set_seed(seed)
    if generator is not None:
        rank = dist.get_rank() if dist.is_initialized() else 0
        generator.manual_seed(seed + rank)
    guard.after_rollback()
    log.warning(
        "rollback %d/%d at step %d: back to %s (step %d), seed %d",
        rollbacks,
        spec.max_rollbacks,
        state.step,
        target,
        back.step,
        seed,
    )
    reporter.report(
        state.step,
        {
            "health_rollbacks": float(rollbacks),
            "health_rollback_to_step": float(back.step),
            "health_seed": float(seed),
        },
    )
    return back
