"""What an attempt held, as the columns a query reads: one list for the GPU-hour budgets
(``service.accounts.budgets``) and the fair-share usage history (``service.scheduler.usage``),
which must charge an attempt alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, or_

from service.db.tables import Attempt, Job

__all__ = ["HELD", "running_after"]

# started_at, ended_at, workers (an elastic attempt's own width), CPUs and GPUs per worker,
# the accelerator type it ran on; select from Attempt joined to its Job.
HELD: tuple[Any, ...] = (
    Attempt.started_at,
    Attempt.ended_at,
    func.coalesce(Attempt.num_workers, Job.num_workers),
    Job.cpus_per_worker,
    Job.gpus_per_worker,
    Attempt.accelerator,
)


def running_after(moment: datetime) -> ColumnElement[bool]:
    """The attempts still running, or ended after ``moment``."""
    return or_(Attempt.ended_at.is_(None), Attempt.ended_at > moment)
