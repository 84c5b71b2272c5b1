"""User-side job operations: get, list, cancel, resume, and the per-job pages (events,
metrics, checkpoints, logs), plus the queue and cluster views.

Visibility: a job of another team is ``NotFound`` for everyone but an admin. Mutations need
a member or admin (``require_writer``). Functions take keyword-only arguments and never
import FastAPI.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, exists, select
from sqlalchemy.orm import Session, aliased, defer

from service.accounts.auth import Principal, require_writer
from service.db.engine import Database
from service.db.paging import keyset_page
from service.db.tables import ACTIVE, Attempt, Checkpoint, Event, Job, MetricPoint
from service.errors import Conflict, IllegalTransition, NotFound
from service.jobs.privacy import redact_reasons
from service.jobs.read_model import first_queue_position, get_job_row, job_read
from service.jobs.states import ErrorInfo, JobStatus, transition
from service.launch import Launcher
from service.schemas.jobs import (
    AttemptRead,
    AttemptsPage,
    CheckpointRead,
    CheckpointsPage,
    EventRead,
    EventsPage,
    JobRead,
    JobsPage,
    MetricRead,
    MetricsPage,
)
from shunter.jobspec.vocab import EventType

__all__ = [
    "cancel_job",
    "get_job",
    "list_checkpoints",
    "list_events",
    "list_jobs",
    "list_metrics",
    "newest_verified_checkpoint",
    "resume_job",
    "visible_job",
]

log = logging.getLogger(__name__)
S = JobStatus


def newest_verified_checkpoint(session: Session, *, job_id: str) -> str | None:
    """URI of the job's newest verified checkpoint (what the next attempt resumes from)."""
    return session.execute(
        select(Checkpoint.uri)
        .where(Checkpoint.job_id == job_id, Checkpoint.verified.is_(True))
        .order_by(Checkpoint.step.desc(), Checkpoint.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def visible_job(session: Session, *, principal: Principal, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None or not principal.sees_team(job.team):
        raise NotFound(f"job {job_id} not found")
    return job


def get_job(conn: Connection, *, principal: Principal, job_id: str) -> JobRead:
    """The API's most frequent call: one primary-key read (Core, no ORM session). Position,
    reason and ETAs are the stored ones (the scheduler writes them each tick)."""
    row = get_job_row(conn, job_id)
    if row is None or not principal.sees_team(row.team):
        raise NotFound(f"job {job_id} not found")
    job = job_read(row)
    if job.pending_reason:  # other teams' job ids become "another team's job"
        (reason,) = redact_reasons(conn, principal=principal, reasons=[job.pending_reason])
        job = job.model_copy(update={"pending_reason": reason})
    return job


def list_jobs(
    session: Session,
    *,
    principal: Principal,
    limit: int,
    cursor: str | None = None,
    status: Sequence[str] = (),
    name: str | None = None,
    team: str | None = None,
    include_spec: bool = False,
) -> JobsPage:
    """The caller's team's jobs, newest first (admins: all teams, or ``team``).

    Summaries: ``spec`` is null and its column is not even read, unless ``include_spec``
    (a spec can be up to the 1 MiB body limit; a page of them would be unbounded)."""
    q = select(Job).order_by(Job.id.desc())
    if not include_spec:
        q = q.options(defer(Job.spec))
    if not principal.is_admin:
        q = q.where(Job.team == principal.team)
    elif team is not None:
        q = q.where(Job.team == team)
    if status:
        q = q.where(Job.status.in_(list(status)))
    if name is not None:
        q = q.where(Job.name == name)
    rows, nxt = keyset_page(
        session, q, Job.id, cursor=cursor, limit=limit, kind=str, newest_first=True
    )
    data = [job_read(j, position=None, with_spec=include_spec) for j in rows]
    return JobsPage(data=data, next_cursor=nxt)


def cancel_job(db: Database, *, principal: Principal, job_id: str, launcher: Launcher) -> JobRead:
    """queued -> cancelled now; starting/running -> cancelling + stop the launch (the
    scheduler finishes it to cancelled). Idempotent on cancelling/cancelled; 409 otherwise."""
    require_writer(principal)

    def _cancel(session: Session) -> tuple[JobRead, str | None]:
        job = visible_job(session, principal=principal, job_id=job_id)
        status = JobStatus(job.status)
        if status in (S.CANCELLING, S.CANCELLED):
            return job_read(job), None
        if status in (S.SUCCEEDED, S.FAILED, S.PRUNED):
            raise Conflict(f"job {job_id} is {status}; only an unfinished job can be cancelled")
        by = f"cancelled by {principal.name}"
        if status in (S.QUEUED, S.PAUSED):  # nothing runs: cancelled now
            job = transition(
                session,
                job_id=job_id,
                to=S.CANCELLED,
                expect_from={S.QUEUED, S.PAUSED},
                event_type=EventType.CANCELLED,
                message=by,
                error=ErrorInfo(type="cancelled", message=by),
            )
            return job_read(job), None
        job = transition(
            session,
            job_id=job_id,
            to=S.CANCELLING,
            event_type=EventType.CANCEL_REQUESTED,
            message=by,
            values={"cancel_requested": True},
        )
        attempt = session.execute(
            select(Attempt.submission_id).where(Attempt.job_id == job_id, Attempt.status == ACTIVE)
        ).scalar_one_or_none()
        return job_read(job), attempt

    for _ in range(3):
        try:
            read, submission_id = db.write(_cancel)
            break
        except IllegalTransition:
            continue  # the scheduler moved it meanwhile (e.g. claimed it); decide again
    else:
        raise Conflict(f"job {job_id} keeps changing; retry the cancel")
    if submission_id is not None:
        try:
            launcher.stop(submission_id)
        except Exception:  # the scheduler retries the stop while the job is cancelling
            log.exception("stop of %s failed; the scheduler will retry", submission_id)
    return read


def resume_job(db: Database, *, principal: Principal, job_id: str) -> JobRead:
    """failed/cancelled/paused -> queued; the next attempt resumes from the newest verified
    checkpoint (``resume_from``; for a paused job, its pause checkpoint). Infra retries start
    over."""
    require_writer(principal)

    def _resume(session: Session) -> JobRead:
        job = visible_job(session, principal=principal, job_id=job_id)
        if job.status not in (S.FAILED, S.CANCELLED, S.PAUSED):
            raise Conflict(
                f"job {job_id} is {job.status}; only a failed, cancelled or paused job can be "
                "resumed"
            )
        resume_from = newest_verified_checkpoint(session, job_id=job_id)
        job = transition(
            session,
            job_id=job_id,
            to=S.QUEUED,
            expect_from={S.FAILED, S.CANCELLED, S.PAUSED},
            event_type=EventType.RESUMED,
            message=f"resumed by {principal.name}"
            + (f" from {resume_from}" if resume_from else " from scratch"),
            values={
                "resume_from": resume_from,
                "infra_retries": 0,
                "error_type": None,
                "error_message": None,
                "finished_at": None,
                "cancel_requested": False,
                "final_model_uri": None,
                "pending_reason": "waiting for the scheduler",
                "queue_position": first_queue_position(
                    session, job_id=job_id, priority=job.priority
                ),
            },
        )
        return job_read(job)

    return db.write(_resume)


def _job_rows(
    session: Session,
    principal: Principal,
    job_id: str,
    table: type[Event] | type[Checkpoint],
    *,
    limit: int,
    cursor: str | None,
) -> tuple[list[Any], str | None]:
    """A page of a visible job's rows of ``table`` in id order, and the next page's cursor."""
    visible_job(session, principal=principal, job_id=job_id)
    q = select(table).where(table.job_id == job_id).order_by(table.id)
    return keyset_page(session, q, table.id, cursor=cursor, limit=limit)


def list_events(
    session: Session, *, principal: Principal, job_id: str, limit: int, cursor: str | None
) -> EventsPage:
    rows, nxt = _job_rows(session, principal, job_id, Event, limit=limit, cursor=cursor)
    return EventsPage(data=[EventRead.model_validate(e) for e in rows], next_cursor=nxt)


def list_attempts(session: Session, *, principal: Principal, job_id: str) -> AttemptsPage:
    """Every attempt of the job, oldest first, with the width each ran at."""
    visible_job(session, principal=principal, job_id=job_id)
    rows = session.execute(
        select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)
    ).scalars()
    return AttemptsPage(data=[AttemptRead.model_validate(a) for a in rows])


def list_metrics(
    session: Session,
    *,
    principal: Principal,
    job_id: str,
    limit: int,
    cursor: str | None,
    after: int | None = None,
    names: Sequence[str] = (),
    all_attempts: bool = False,
) -> MetricsPage:
    """Points in arrival order. ``after``: a point id (as in the SSE stream's event ids).

    A step an attempt trained again after resuming (the steps past the checkpoint it
    resumed from, which the lost attempt had reached too) has a point per attempt: by default
    only the newest attempt's point of each (step, name) is listed, so a loss curve shows
    each step once; ``all_attempts`` lists every attempt's points."""
    job = visible_job(session, principal=principal, job_id=job_id)
    q = select(MetricPoint).where(MetricPoint.job_id == job_id)
    if not all_attempts and job.attempt > 1:  # one attempt: nothing can be superseded
        newer = aliased(MetricPoint)
        q = q.where(
            ~exists().where(
                newer.job_id == MetricPoint.job_id,
                newer.step == MetricPoint.step,
                newer.name == MetricPoint.name,
                newer.attempt > MetricPoint.attempt,
            )
        )
    q = q.order_by(MetricPoint.id)
    if names:
        q = q.where(MetricPoint.name.in_(list(names)))
    if after is not None:
        q = q.where(MetricPoint.id > after)
    rows, nxt = keyset_page(session, q, MetricPoint.id, cursor=cursor, limit=limit)
    return MetricsPage(data=[MetricRead.model_validate(m) for m in rows], next_cursor=nxt)


def list_checkpoints(
    session: Session, *, principal: Principal, job_id: str, limit: int, cursor: str | None
) -> CheckpointsPage:
    rows, nxt = _job_rows(session, principal, job_id, Checkpoint, limit=limit, cursor=cursor)
    return CheckpointsPage(data=[CheckpointRead.model_validate(c) for c in rows], next_cursor=nxt)
