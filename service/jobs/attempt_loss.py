"""THE attempt-loss policy: what happens to a job when its active attempt is lost.

An attempt is lost when its lease expired on the database clock (the scheduler's reaper), its
driver ended without a final report (reconcile against the launcher), the launcher refused
to start it, or its driver reported a retryable infra error (``RETRYABLE_ERRORS``: the object
store stayed away past its bound). All three go through ``lose_attempt``:

1. one conditional UPDATE marks the attempt ``lost``: it must still be the job's active attempt
   with that number, and for ``LEASE_EXPIRED`` its lease must still be expired on the database
   clock (a driver that heartbeated meanwhile is spared). ``None`` when nothing matched;
2. ``decide_after_loss`` (pure, table-tested) picks the job's next status;
3. ``transition`` moves the job, with one message format for every cause.

Callers write the database first and stop the launcher after, so a driver that renewed its
lease in between is never stopped.

To add a cause (e.g. ``PREEMPTED``): add the enum value, its wording in ``_WHAT`` and whether
it uses up an infra retry in ``COUNTS_AS_INFRA_RETRY``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from service.db.sqltime import utcnow
from service.db.tables import ACTIVE, Attempt, Event, Job
from service.jobs.queries import newest_verified_checkpoint
from service.jobs.read_model import first_queue_position
from service.jobs.states import ErrorInfo, JobStatus, transition
from shunter.jobspec.vocab import EventType

__all__ = [
    "COUNTS_AS_INFRA_RETRY",
    "HEAD_LOST_EVENT",
    "RETRYABLE_ERRORS",
    "LossCause",
    "LossDecision",
    "decide_after_loss",
    "head_lost_message",
    "lose_attempt",
]

S = JobStatus


class LossCause(enum.StrEnum):
    LEASE_EXPIRED = "lease_expired"
    DRIVER_ENDED = "driver_ended"
    LAUNCH_FAILED = "launch_failed"
    HUNG = "hung"  # no step progress (service.health.hang); bounded by max_restarts there
    # The driver reported ``storage_unavailable``: the object store stayed away past the bound.
    STORAGE_UNAVAILABLE = "storage_unavailable"
    # The Ray head went away with the attempt: the head came back without it (Ray says it
    # ended, or does not know it), or its lease expired while the head did not answer.
    RAY_HEAD_LOST = "ray_head_lost"


# The event that says what became of an attempt when the Ray head was lost (``resumed``
# here; ``survived`` from ``service.jobs.reconcile``).
HEAD_LOST_EVENT = EventType.RAY_HEAD_LOST

_WHAT: Mapping[LossCause, str] = {
    LossCause.LEASE_EXPIRED: "lease expired",
    LossCause.DRIVER_ENDED: "driver ended without a final report",
    LossCause.LAUNCH_FAILED: "launch failed",
    LossCause.HUNG: "hung",
    LossCause.STORAGE_UNAVAILABLE: "storage_unavailable",
    LossCause.RAY_HEAD_LOST: "the Ray head was lost",
}

# Whether a loss of this cause uses up one of the job's ``max_infra_retries``.
COUNTS_AS_INFRA_RETRY: Mapping[LossCause, bool] = {
    LossCause.LEASE_EXPIRED: True,
    LossCause.DRIVER_ENDED: True,
    LossCause.LAUNCH_FAILED: True,
    LossCause.HUNG: False,
    LossCause.STORAGE_UNAVAILABLE: True,
    LossCause.RAY_HEAD_LOST: True,
}


# Error types a driver reports that are the platform's, not the job's: the attempt is lost
# (an infra retry) and the job requeued from its newest verified checkpoint, not failed.
RETRYABLE_ERRORS: Mapping[str, LossCause] = {"storage_unavailable": LossCause.STORAGE_UNAVAILABLE}


@dataclass(frozen=True, kw_only=True)
class LossDecision:
    to: JobStatus
    error: ErrorInfo | None
    message: str
    infra_retries: int  # the job's count after this loss


def decide_after_loss(
    *, status: JobStatus, cause: LossCause, infra_retries: int, max_infra_retries: int
) -> LossDecision:
    """Next status of a job whose active attempt was lost. Pure; table-tested."""
    if status == S.CANCELLING:
        return LossDecision(
            to=S.CANCELLED,
            error=ErrorInfo(type="cancelled", message="cancelled by user"),
            message="attempt lost while cancelling",
            infra_retries=infra_retries,
        )
    counts = COUNTS_AS_INFRA_RETRY[cause]
    if not counts or infra_retries < max_infra_retries:
        used = infra_retries + 1 if counts else infra_retries
        budget = f" ({used}/{max_infra_retries} infra retries)" if counts else ""
        return LossDecision(
            to=S.QUEUED, error=None, message=f"requeued{budget}", infra_retries=used
        )
    msg = f"{max_infra_retries} infra retries used up"
    return LossDecision(
        to=S.FAILED,
        error=ErrorInfo(type="retries_exhausted", message=msg),
        message=msg,
        infra_retries=infra_retries,
    )


def lose_attempt(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    cause: LossCause,
    detail: str = "",
    max_infra_retries: int,
    only_if_expired: bool = False,
) -> Job | None:
    """Mark ``attempt`` of ``job_id`` lost and requeue / fail / finish-cancel the job.

    Returns the moved job, or ``None`` when the attempt is no longer the active one (it
    reported, was reaped already) or, for ``LEASE_EXPIRED`` (and ``only_if_expired``), when
    its lease was renewed. ``RAY_HEAD_LOST`` also writes a ``ray_head_lost`` event that says
    what became of the job (``resumed``: requeued from its newest verified checkpoint).
    """
    reason = _WHAT[cause] + (f": {detail}" if detail else "")
    where = [Attempt.job_id == job_id, Attempt.number == attempt, Attempt.status == ACTIVE]
    if cause == LossCause.LEASE_EXPIRED or only_if_expired:
        where.append(Attempt.lease_expires_at < utcnow())
    lost = session.execute(
        update(Attempt)
        .where(*where)
        .values(status="lost", ended_at=utcnow(), end_reason=reason)
        .returning(Attempt.id)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if lost is None:
        return None
    job = session.get(Job, job_id, populate_existing=True)
    assert job is not None
    decision = decide_after_loss(
        status=JobStatus(job.status),
        cause=cause,
        infra_retries=job.infra_retries,
        max_infra_retries=max_infra_retries,
    )
    values: dict[str, Any] = {"infra_retries": decision.infra_retries}
    if decision.to == S.QUEUED:
        values["resume_from"] = newest_verified_checkpoint(session, job_id=job_id)
        values["pending_reason"] = f"requeued after attempt {attempt} was lost ({_WHAT[cause]})"
        values["queue_position"] = first_queue_position(
            session, job_id=job_id, priority=job.priority
        )
    error = decision.error
    if error is not None and decision.to == S.FAILED:
        error = ErrorInfo(type=error.type, message=f"{error.message}; last: {reason}")
    moved = transition(
        session,
        job_id=job_id,
        to=decision.to,
        event_type=EventType.ATTEMPT_LOST,
        message=f"attempt {attempt} lost ({reason}); {decision.message}",
        error=error,
        values=values,
    )
    if cause == LossCause.RAY_HEAD_LOST:
        session.add(Event(job_id=job_id, type=HEAD_LOST_EVENT, attempt=attempt,
                          message=head_lost_message(attempt, moved)))  # fmt: skip
        session.flush()
    return moved


def head_lost_message(attempt: int, job: Job) -> str:
    """The ``ray_head_lost`` event's message for an attempt lost with the head: it starts
    with what happened to the job (``resumed``, or ``failed``/``cancelled``), then why."""
    if job.status == str(S.QUEUED):
        where = f"checkpoint {job.resume_from}" if job.resume_from else "the start (no checkpoint)"
        return (
            f"resumed: attempt {attempt} was lost with the Ray head; the job is requeued "
            f"and attempt {attempt + 1} resumes from {where}"
        )
    return f"{job.status}: attempt {attempt} was lost with the Ray head"
