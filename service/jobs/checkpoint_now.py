"""Checkpoint-now: preemption and pause of a running job, losing no step.

The mechanism (the scheduler's policy decides who; this module only executes):

1. ``request_preemption`` records a request on the job's active attempt (``stop_requested_at``
   on the database clock, ``stop_cause`` preempt|pause, ``stop_detail``) and an event;
2. the attempt's heartbeat reply carries ``checkpoint_now`` (``stop_request``); rank 0 of the
   Ray Train workers polls it, every rank agrees at the next step boundary, saves a checkpoint
   (registered like any other) and returns; the driver reports ``preempted`` at that step;
3. ``finish_preempted`` ends the attempt ``preempted`` (not a failure, no infra retry, not a
   Ray Train restart) and moves the job to ``queued`` (preempt) or ``paused`` (pause) with
   ``resume_from`` = the newest verified checkpoint, i.e. the one just saved;
4. ``sweep_overdue`` (every scheduler tick) ends attempts that did not report within
   ``preempt_checkpoint_timeout_s`` the same way, then stops their launch: they resume from
   their last verified checkpoint.

``pause_job`` / ``resume_paused`` are the user-facing commands (``POST /v1/jobs/{id}/pause``,
``/resume``, and the OpenAI-compatible ``fine_tuning/jobs/{id}/pause|resume``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from service.accounts.auth import Principal, require_writer
from service.db.engine import Database
from service.db.sqltime import utcnow, utcnow_plus
from service.db.tables import ACTIVE, STOP_CAUSES, Attempt, Event, Job
from service.errors import BadRequest, Conflict, IllegalTransition
from service.jobs.queries import newest_verified_checkpoint, resume_job, visible_job
from service.jobs.read_model import job_read
from service.jobs.states import JobStatus, transition
from service.launch import Launcher
from service.schemas.jobs import JobRead
from shunter.jobspec.vocab import EventType

__all__ = [
    "RESIZE_DETAIL",
    "StopRequest",
    "finish_preempted",
    "pause_job",
    "request_preemption",
    "resume_paused",
    "stop_request",
    "sweep_overdue",
]

log = logging.getLogger(__name__)
S = JobStatus
Cause = Literal["preempt", "pause", "prune"]
# A request may be made while the attempt is still launching: rank 0 sees it at step 1.
_STOPPABLE = frozenset({S.STARTING, S.RUNNING})
# Where a stopped attempt's job goes, by the request's cause, and the event it writes.
_STOP_TO = {"preempt": S.QUEUED, "pause": S.PAUSED, "prune": S.PRUNED}
_STOP_EVENT = {
    S.QUEUED: EventType.PREEMPTED,
    S.PAUSED: EventType.PAUSED,
    S.PRUNED: EventType.PRUNED,
}
# A resize of an elastic job (``scheduler.resize``) is a checkpoint-now stop with cause
# ``preempt`` on the wire, its detail starting with this: its events are ``resized``, not
# ``preempt_requested`` / ``preempted`` (no ``job.preempted`` webhook, not counted as one).
RESIZE_DETAIL = "resize: "
_REQUEST_EVENT = {
    "preempt": EventType.PREEMPT_REQUESTED,
    "pause": EventType.PAUSE_REQUESTED,
    "prune": EventType.PRUNE_REQUESTED,
}


@dataclass(frozen=True, kw_only=True)
class StopRequest:
    cause: Cause
    detail: str


def request_preemption(session: Session, *, job_id: str, cause: str, detail: str) -> bool:
    """Ask the job's active attempt to checkpoint at its next step boundary and stop.

    ``cause``: ``preempt`` (the job is requeued), ``pause`` (it is held ``paused``) or
    ``prune`` (a sweep's trial ends ``pruned``). False when the job is not starting/running
    (nothing to stop) or a cancel is under way. A repeated request is a no-op that returns
    True; a pause or a prune upgrades a pending preempt, and a prune a pending pause.
    """
    if cause not in STOP_CAUSES:
        raise BadRequest(f"cause must be one of {list(STOP_CAUSES)}, not {cause!r}")
    job = session.get(Job, job_id, populate_existing=True)
    if job is None or JobStatus(job.status) not in _STOPPABLE or job.cancel_requested:
        return False
    open_request: ColumnElement[bool] = Attempt.stop_cause.is_(None)
    if cause in ("pause", "prune"):
        open_request = or_(open_request, Attempt.stop_cause == "preempt")
    if cause == "prune":
        open_request = or_(open_request, Attempt.stop_cause == "pause")
    recorded = session.execute(
        update(Attempt)
        .where(Attempt.job_id == job_id, Attempt.status == ACTIVE, open_request)
        .values(stop_requested_at=utcnow(), stop_cause=cause, stop_detail=detail[:2000])
        .returning(Attempt.number)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if recorded is None:  # already requested (same or stronger cause), or no active attempt
        return _active_cause(session, job_id) is not None
    if detail.startswith(RESIZE_DETAIL):
        session.flush()  # the caller writes the ``resized`` event
        return True
    session.add(
        Event(
            job_id=job_id,
            type=_REQUEST_EVENT[cause],
            message=f"checkpoint at the next step and stop ({cause}): {detail}",
            attempt=recorded,
        )
    )
    session.flush()
    return True


def _active_cause(session: Session, job_id: str) -> str | None:
    return session.execute(
        select(Attempt.stop_cause).where(Attempt.job_id == job_id, Attempt.status == ACTIVE)
    ).scalar_one_or_none()


def stop_request(session: Session, *, job_id: str, attempt: int) -> StopRequest | None:
    """The pending checkpoint-now request of this attempt, for its heartbeat reply."""
    row = session.execute(
        select(Attempt.stop_cause, Attempt.stop_detail).where(
            Attempt.job_id == job_id, Attempt.number == attempt, Attempt.status == ACTIVE
        )
    ).first()
    if row is None or row[0] not in STOP_CAUSES:
        return None
    cause = cast(Cause, row[0])
    return StopRequest(cause=cause, detail=row[1] or "")


def finish_preempted(
    session: Session, *, job_id: str, attempt: int, step: int | None, timed_out: bool = False
) -> Job | None:
    """End ``attempt`` as ``preempted`` and requeue (preempt) or hold (pause) its job.

    ``step``: where the attempt checkpointed (its report), None when it timed out. Returns
    None when the attempt is no longer active (it finished or was lost meanwhile).
    """
    row = session.execute(
        select(Attempt.stop_cause, Attempt.stop_detail).where(
            Attempt.job_id == job_id, Attempt.number == attempt, Attempt.status == ACTIVE
        )
    ).first()
    if row is None:
        return None
    cause: str = row[0] or "preempt"  # a report without a request: treat as a preemption
    detail = row[1] or "no reason given"
    ckpt = newest_verified_checkpoint(session, job_id=job_id)
    how = (
        f"did not checkpoint within the timeout; stopped, resuming from {ckpt or 'scratch'}"
        if timed_out
        else f"checkpointed at step {step} and stopped"
    )
    reason = f"{cause}: {detail}; {how}"
    ended = session.execute(
        update(Attempt)
        .where(Attempt.job_id == job_id, Attempt.number == attempt, Attempt.status == ACTIVE)
        .values(status="preempted", ended_at=utcnow(), end_reason=reason[:4000])
        .execution_options(synchronize_session=False)
    )
    if ended.rowcount != 1:  # type: ignore[attr-defined]
        return None
    status = JobStatus(session.execute(select(Job.status).where(Job.id == job_id)).scalar_one())
    if status == S.CANCELLING:  # a cancel won the race: the reconcile sweep finishes it
        return None
    to = _STOP_TO.get(cause, S.QUEUED)
    if to == S.QUEUED and detail.startswith(RESIZE_DETAIL):
        what = detail[len(RESIZE_DETAIL) :]
        return transition(
            session,
            job_id=job_id,
            to=to,
            event_type=EventType.RESIZED,
            message=f"attempt {attempt} {how} to resize ({what})",
            values={"resume_from": ckpt, "pending_reason": f"requeued to resize ({what})"},
        )
    return transition(
        session,
        job_id=job_id,
        to=to,
        event_type=_STOP_EVENT[to],
        message=f"attempt {attempt} {how} ({cause}: {detail})",
        values={
            "resume_from": ckpt,
            "pending_reason": f"requeued after a preemption ({detail})" if to == S.QUEUED else None,
        },
    )


def _overdue(session: Session, timeout_s: float) -> list[tuple[str, int, str]]:
    rows = session.execute(
        select(Attempt.job_id, Attempt.number, Attempt.submission_id)
        .join(Job, Job.id == Attempt.job_id)
        .where(
            and_(
                Attempt.status == ACTIVE,
                Attempt.stop_requested_at < utcnow_plus(-timeout_s),
                Job.status.in_([str(s) for s in _STOPPABLE]),
            )
        )
        .order_by(Attempt.id)
    )
    return [(r[0], r[1], r[2]) for r in rows]


def _finisher(job_id: str, attempt: int) -> Callable[[Session], Job | None]:
    def _finish(session: Session) -> Job | None:
        return finish_preempted(session, job_id=job_id, attempt=attempt, step=None, timed_out=True)

    return _finish


def sweep_overdue(db: Database, launcher: Launcher, *, timeout_s: float) -> list[str]:
    """End every attempt that has not checkpointed ``timeout_s`` after its request, then stop
    its launch (database first: a report that lands meanwhile wins and nothing is stopped).
    Returns the submission ids stopped."""
    stopped = []
    for job_id, number, submission_id in db.read(lambda s: _overdue(s, timeout_s)):
        try:
            job = db.write(_finisher(job_id, number))
        except IllegalTransition as e:  # the job moved meanwhile
            log.info("job %s moved while ending its overdue preemption: %s", job_id, e)
            continue
        if job is None:
            continue
        try:
            launcher.stop(submission_id)
        except Exception as e:  # fenced anyway: its next write gets 409, the reaper follows
            log.warning("stop of %s after a checkpoint timeout failed: %s", submission_id, e)
        stopped.append(submission_id)
    return stopped


def pause_job(db: Database, *, principal: Principal, job_id: str) -> JobRead:
    """queued -> paused at once; starting/running -> checkpoint at the next step, then paused.
    Idempotent on a paused job (or one already asked to pause); 409 for finished jobs."""
    require_writer(principal)

    def _pause(session: Session) -> JobRead:
        job = visible_job(session, principal=principal, job_id=job_id)
        status = JobStatus(job.status)
        by = f"paused by {principal.name}"
        if status == S.QUEUED:
            job = transition(
                session,
                job_id=job_id,
                to=S.PAUSED,
                expect_from={S.QUEUED},
                event_type=EventType.PAUSED,
                message=by,
                values={"pending_reason": None, "queue_position": None},
            )
        elif status != S.PAUSED and not request_preemption(
            session, job_id=job_id, cause="pause", detail=by
        ):
            raise Conflict(
                f"job {job_id} is {status}"
                + (" with a cancel requested" if job.cancel_requested else "")
                + "; only a queued, starting or running job can be paused"
            )
        session.refresh(job)
        return job_read(job)

    return db.write(_pause)


def resume_paused(db: Database, *, principal: Principal, job_id: str) -> JobRead:
    """paused -> queued; the next attempt resumes from the pause checkpoint. (``resume_job``
    also resumes failed and cancelled jobs; this entry point refuses anything but paused.)"""

    def _status(session: Session) -> str:
        return visible_job(session, principal=principal, job_id=job_id).status

    status = db.read(_status)
    if status != S.PAUSED:
        raise Conflict(f"job {job_id} is {status}; only a paused job can be resumed here")
    return resume_job(db, principal=principal, job_id=job_id)
