"""Job -> ``JobRead`` and the queue-position query. Shared by the user API and the scheduler's
read paths; pure read helpers over a session.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, and_, bindparam, case, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from service.db.models import Job
from service.queue import PRIORITY_RANK
from service.schemas import JobError, JobRead, Progress

__all__ = ["get_job_row", "job_read", "priority_rank_sql", "queue_position"]

_JOBS = Job.__table__
# Built once: statement construction is a measurable share of a hot GET.
_GET_JOB = select(_JOBS).where(_JOBS.c.id == bindparam("job_id"))


def priority_rank_sql() -> ColumnElement[int]:
    return case(*((Job.priority == name, rank) for name, rank in PRIORITY_RANK.items()), else_=1)


def queue_position(session: Session | Connection, job: Job | Row[Any]) -> int:
    """1-based position of a queued job in policy order (priority, created_at, id)."""
    rank = PRIORITY_RANK.get(job.priority, 1)
    r = priority_rank_sql()
    ahead = session.execute(
        select(func.count())
        .select_from(Job)
        .where(
            Job.status == "queued",
            or_(
                r < rank,
                and_(r == rank, Job.created_at < job.created_at),
                and_(r == rank, Job.created_at == job.created_at, Job.id < job.id),
            ),
        )
    ).scalar_one()
    return int(ahead) + 1


def job_read(job: Job | Row[Any], *, position: int | None = None) -> JobRead:
    """A ``Job`` (ORM) or a Core row of the jobs table -> the public job object."""
    progress = None
    if job.progress_step is not None or job.progress_total_steps is not None:
        progress = Progress(
            step=job.progress_step, total_steps=job.progress_total_steps, epoch=job.progress_epoch
        )
    error = None
    if job.error_type is not None:
        error = JobError(type=job.error_type, message=job.error_message or "")
    queued = job.status == "queued"
    return JobRead(
        id=job.id,
        name=job.name,
        team=job.team,
        status=job.status,
        priority=job.priority,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        attempt=job.attempt,
        spec=job.spec,
        queue_position=position if queued else None,
        pending_reason=job.pending_reason if queued else None,
        progress=progress,
        latest_metrics=job.latest_metrics,
        error=error,
        latest_checkpoint=job.latest_checkpoint,
        final_model_uri=job.final_model_uri,
        resume_from=job.resume_from,
        cancel_requested=job.cancel_requested,
        created_by=job.created_by,
    )


def get_job_row(conn: Connection, job_id: str) -> Row[Any] | None:
    """One job as a Core row (the hot ``GET /v1/jobs/{id}`` path: no ORM session)."""
    return conn.execute(_GET_JOB, {"job_id": job_id}).first()
