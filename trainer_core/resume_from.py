"""Where a run starts from: this job's newest verified checkpoint (``pick_resume``, chosen
by rank 0 and broadcast), another job's (``apply_init_from``: everything or the weights
only), and how a checkpoint is read (``readable_checkpoint``: local disk or the reporter's
object-storage view; ``checkpoint_problem``: why one does not verify)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

from trainer_core.checkpoint import latest_verified, load_checkpoint, verify_checkpoint
from trainer_core.fetch import CheckpointFiles
from trainer_core.reporter import Reporter
from trainer_core.run_state import Run, State

__all__ = [
    "apply_init_from",
    "checkpoint_problem",
    "pick_resume",
    "rank0_choice",
    "readable_checkpoint",
]

log = logging.getLogger("trainer_core.loop")


def apply_init_from(init: Any, run: Run, reporter: Reporter, state: State) -> State:
    """Start from another job's checkpoint: everything (``resume``) or the weights only."""
    if not isinstance(init, dict):  # the JobSpec section itself (a pydantic model)
        init = init.model_dump()
    path = Path(init["path"])
    files = reporter.checkpoint_files(path)
    if (problem := checkpoint_problem(path, files)) is not None:
        raise RuntimeError(f"model.init_from checkpoint {path} does not verify: {problem}")
    engine = run.engine
    if init.get("resume"):
        saved = load_checkpoint(
            path, engine, scheduler=run.scheduler, generator=run.generator, files=files
        )
        log.info("continuing %s from %s at step %d", init["job"], path, saved["step"])
        return State(**{**saved, "world_size": state.world_size})
    lrs = [group["lr"] for group in engine.optimizer.param_groups]
    engine.load(path, files=files)  # model and optimizer; the optimizer's part is dropped below
    engine.optimizer.state.clear()  # weights only: fresh moments and step counts
    for group, lr in zip(engine.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr  # this job's schedule, not the saved job's last learning rate
    log.info("initialised weights from %s (%s)", path, init["job"])
    return state


def pick_resume(reporter: Reporter, output_dir: Path) -> Path | None:
    """Rank 0 chooses (hashing is not free); every rank gets the same answer."""

    def choose() -> Path | None:
        given = reporter.latest_checkpoint()
        files = None if given is None else reporter.checkpoint_files(given)
        problem = None if given is None else checkpoint_problem(given, files)
        if problem is not None:
            log.warning("reporter's checkpoint %s does not verify (%s); scanning", given, problem)
            given = None
        return given or latest_verified(output_dir)

    return rank0_choice(choose)


def readable_checkpoint(reporter: Reporter, path: Path) -> tuple[Path, CheckpointFiles | None]:
    """Where to load this attempt's checkpoint ``path`` from, and how: on local disk, or (a
    job on several nodes without a shared disk, whose staging holds only this node's part)
    through the reporter's view of the copy in object storage, which has its own directory."""
    files = reporter.checkpoint_files(path)
    return (path if files is None else files.path), files


def checkpoint_problem(path: Path, files: CheckpointFiles | None) -> str | None:
    """Why ``path`` is no checkpoint to load: hashed on local disk, or asked of ``files``."""
    return verify_checkpoint(path) if files is None else files.problem()


def rank0_choice(choose: Callable[[], Path | None]) -> Path | None:
    """Rank 0's ``choose()``, broadcast to every rank (a collective when distributed)."""
    choice: list[Path | None] = [None]
    if not dist.is_initialized() or dist.get_rank() == 0:
        choice[0] = choose()
    if dist.is_initialized():
        dist.broadcast_object_list(choice, src=0)
    return choice[0]
