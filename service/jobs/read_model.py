"""Job -> ``JobRead``, and the first queue position a job gets when it enters the queue.

The queue position and pending reason are stored on the job row: the scheduler writes them for
every queued job once per tick (``service.scheduler.record.store_queue``, from ``policy.planner``),
and submit/resume write a first value (``first_queue_position``), so reading a job is one
primary-key read and never re-derives the queue order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, select, update
from sqlalchemy.orm import Session

from service.db.rows import from_row
from service.db.tables import Job
from service.policy.snapshot import PRIORITY_RANK
from service.schemas.jobs import JobError, JobRead, Progress
from shunter.jobspec.vocab import priority_rank

__all__ = ["first_queue_position", "get_job_row", "job_read"]

_JOBS = Job.__table__
# Built once: statement construction is a measurable share of a hot GET.
_GET_JOB = select(_JOBS).where(_JOBS.c.id == bindparam("job_id"))


def first_queue_position(session: Session, *, job_id: str, priority: str) -> int:
    """Make room for a job entering the queue now and return its position.

    By the policy's static order (``policy.order.static_key``: priority class, then time
    waited) every queued job of its class or a higher one has waited longer, so it goes right
    behind them; the queued jobs of lower classes move back one. The next scheduler tick
    replaces every position with the full plan's (fair share included)."""
    rank = priority_rank(priority)
    ahead_classes = [name for name, r in PRIORITY_RANK.items() if r <= rank]
    queued = (Job.status == "queued", Job.id != job_id)
    # Counted on the (status, priority) index alone (an id filter would read every row);
    # the job itself, if it is already queued in one of these classes, is not ahead of itself.
    ahead = session.execute(
        select(func.count())
        .select_from(Job)
        .where(Job.status == "queued", Job.priority.in_(ahead_classes))
    ).scalar_one()
    itself = session.execute(select(Job.status, Job.priority).where(Job.id == job_id)).first()
    if itself is not None and itself.status == "queued" and itself.priority in ahead_classes:
        ahead -= 1
    position = int(ahead) + 1
    session.execute(
        update(Job)
        .where(*queued, Job.queue_position >= position)
        .values(queue_position=Job.queue_position + 1)
        .execution_options(synchronize_session=False)
    )
    return position


def job_read(
    job: Job | Row[Any], *, position: int | None = None, with_spec: bool = True
) -> JobRead:
    """A ``Job`` (ORM) or a Core row of the jobs table -> the public job object.

    ``with_spec=False`` leaves ``spec`` null (list pages) and never reads the column.

    ``position`` overrides the stored ``queue_position`` (None: the stored one)."""
    progress = None
    if job.progress_step is not None or job.progress_total_steps is not None:
        progress = Progress(
            step=job.progress_step, total_steps=job.progress_total_steps, epoch=job.progress_epoch
        )
    error = None
    if job.error_type is not None:
        error = JobError(type=job.error_type, message=job.error_message or "")
    queued = job.status == "queued"
    return from_row(  # the rest (id, name, status, times, latest_*, ...) as stored
        JobRead,
        job,
        spec=job.spec if with_spec else None,
        queue_position=(position if position is not None else job.queue_position)
        if queued
        else None,
        pending_reason=job.pending_reason if queued else None,
        estimated_start_at=job.estimated_start_at if queued else None,
        estimated_start_p90_at=job.estimated_start_p90_at if queued else None,
        estimated_end_at=job.estimated_end_at if not queued else None,
        estimated_at=job.estimated_at if queued else None,
        estimate_stale=bool(job.queue_stale) if queued else False,
        progress=progress,
        error=error,
    )


def get_job_row(conn: Connection, job_id: str) -> Row[Any] | None:
    """One job as a Core row (the hot ``GET /v1/jobs/{id}`` path: no ORM session)."""
    return conn.execute(_GET_JOB, {"job_id": job_id}).first()
