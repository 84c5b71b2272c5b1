"""What the loop writes from a plan besides claims: preemption requests and the queue's
read model (position, reason, ETAs per job).

Preemption events name the other side only as far as queue privacy allows: a member sees
only its own team's jobs, so a job of another team is described by its class, never by its
id or name (admins read the same text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import Event, Job
from service.jobs.states import ACTIVE_STATES, JobStatus
from service.scheduler.policy.plan import Plan
from service.scheduler.policy.preemption import Preemption
from service.scheduler.policy.snapshot import ActiveJob, QueueEntry

__all__ = ["describe", "preempt", "store_queue"]


def describe(other: QueueEntry, *, seen_by: str) -> str:
    """``other`` as a member of team ``seen_by`` may see it."""
    if other.team == seen_by:
        return f"job {other.job_id}"
    return f"a {other.priority}-priority job of another team"


def preempt(
    session: Session, p: Preemption, fence: Callable[[Session], bool] | None = None
) -> bool:
    """Ask the victim to checkpoint now and stop; an event on both jobs. False if it is no
    longer running, or ``fence`` says this process no longer leads (nothing asked)."""
    if fence is not None and not fence(session):
        return False
    v, j = p.victim, p.for_job
    why = {
        "priority": "a higher priority class",
        "reservation": "its reserved start has come; this job borrowed its capacity",
    }.get(p.cause, "fair share: its team is under")
    detail = f"preempted for {describe(j, seen_by=v.team)} ({why})"
    # The checkpoint-now mechanism (service.jobs.preemption) is imported here, at the call.
    from service.jobs.preemption import request_preemption

    if not request_preemption(session, job_id=v.job_id, cause="preempt", detail=detail):
        return False
    session.add(
        Event(
            job_id=j.job_id,
            type="preempting",
            message=(
                f"preempting {describe(v, seen_by=j.team)} to make room ({p.cause}); "
                "it checkpoints and stops at its next step"
            ),
        )
    )
    session.flush()
    return True


def _same(old: object, new: object) -> bool:
    """Equal, reading a naive datetime (SQLite) as UTC: unchanged rows are not rewritten."""
    if isinstance(old, datetime) and isinstance(new, datetime):
        if old.tzinfo is None:
            old = old.replace(tzinfo=UTC)
        if new.tzinfo is None:
            new = new.replace(tzinfo=UTC)
    return old == new


def store_queue(
    session: Session,
    *,
    plan: Plan,
    reasons: Mapping[str, str],
    starts: Mapping[str, datetime],
    active: Sequence[ActiveJob],
) -> None:
    """Per queued job: position, reason, estimated start; per active job: estimated end.
    Writes only rows whose values changed, and only while the job is in the state read."""
    queued = {d.entry.job_id: d for d in plan.decisions}
    ends = {a.entry.job_id: a.expected_end_at for a in active}
    ids = [*queued, *ends]
    if not ids:
        return
    for job in session.execute(select(Job).where(Job.id.in_(ids))).scalars():
        if job.id in queued and job.status == JobStatus.QUEUED:
            d = queued[job.id]
            values = {
                "queue_position": d.position,
                "pending_reason": reasons.get(job.id, d.reason),
                "estimated_start_at": starts.get(job.id),
                "estimated_end_at": None,
            }
        elif job.id in ends and JobStatus(job.status) in ACTIVE_STATES:
            values = {"estimated_end_at": ends[job.id], "estimated_start_at": None}
        else:
            continue
        for name, value in values.items():
            if _same(getattr(job, name), value):
                continue
            setattr(job, name, value)
    session.flush()
