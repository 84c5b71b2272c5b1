"""What the loop writes from a plan besides claims: preemption requests and the queue's
read model (position, reason, ETAs per job).

Preemption events name the other side only as far as queue privacy allows: a member sees
only its own team's jobs, so a job of another team is described by its class, never by its
id or name (admins read the same text).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, update
from sqlalchemy.orm import Session

from service.db.tables import Event, Job
from service.jobs.states import JobStatus
from service.policy.planner import Plan
from service.policy.preemption import Preemption
from service.policy.snapshot import QueueEntry, Snapshot
from service.scheduler.job_rows import STORED_COLUMNS, JobRows
from shunter.jobspec.vocab import EventType

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
    # The checkpoint-now mechanism (service.jobs.checkpoint_now) is imported here, at the call.
    from service.jobs.checkpoint_now import request_preemption

    if not request_preemption(session, job_id=v.job_id, cause="preempt", detail=detail):
        return False
    session.add(
        Event(
            job_id=j.job_id,
            type=EventType.PREEMPTING,
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


_QUEUED_COLUMNS = STORED_COLUMNS
_ACTIVE_COLUMNS = ("estimated_end_at", "estimated_start_at", "estimated_start_p90_at")
Written = dict[str, dict[str, Any]]  # job id -> the queue columns written


def store_queue(
    session: Session,
    *,
    plan: Plan,
    reasons: Mapping[str, str],
    starts: Mapping[str, datetime],
    snap: Snapshot,
    starts_p90: Mapping[str, datetime] | None = None,
    computed_at: datetime,
    stored: JobRows,
    fence: Callable[[Session], bool] | None = None,
) -> Written:
    """Per queued job the plan reached: position, reason, estimated start, when computed;
    per active job: estimated end. Queued jobs past the plan's depth keep theirs, marked
    stale. ``stored``: each job's queue columns as the leader last read or wrote them
    (``JobRows.stored``); only the values that differ are written, in one batched UPDATE
    per kind, each only while the job is in the status read (a job whose status moved was
    stamped, and is read again next tick). Nothing when ``fence`` says this process no
    longer leads. Returns what it wrote, for the caller to apply (``JobRows.wrote``) once
    committed."""
    if fence is not None and not fence(session):
        return {}
    queued = {d.entry.job_id: d for d in plan.decisions}
    written: Written = {}
    to_queued: list[dict[str, object]] = []
    to_active: list[dict[str, object]] = []
    for job_id, d in queued.items():
        got = stored.stored.get(job_id)
        if got is None or got.status != JobStatus.QUEUED:
            continue
        values: dict[str, object] = {
            "queue_position": d.position,
            "pending_reason": reasons.get(job_id),  # every decision's reason that is not None
            "estimated_start_at": starts.get(job_id),
            "estimated_start_p90_at": (starts_p90 or {}).get(job_id),
            "estimated_end_at": None,
            "queue_stale": False,
        }
        if not all(_same(getattr(got, c), v) for c, v in values.items()):
            written[job_id] = values
            to_queued.append(
                {"b_id": job_id, "b_status": got.status, "b_estimated_at": computed_at}
                | {f"b_{c}": v for c, v in values.items()}
            )
    for a in snap.active:
        job_id = a.entry.job_id
        got = stored.stored.get(job_id)
        if got is None or got.status == JobStatus.QUEUED:
            continue
        end = a.expected_end_at
        if not (
            _same(got.estimated_end_at, end)
            and got.estimated_start_at is None
            and got.estimated_start_p90_at is None
        ):
            written[job_id] = {
                "estimated_end_at": end,
                "estimated_start_at": None,
                "estimated_start_p90_at": None,
            }
            to_active.append(
                {
                    "b_id": job_id,
                    "b_status": got.status,
                    "b_estimated_end_at": end,
                    "b_estimated_start_at": None,
                    "b_estimated_start_p90_at": None,
                }
            )
    for batch, columns, extra in (
        (to_queued, _QUEUED_COLUMNS, ("estimated_at",)),
        (to_active, _ACTIVE_COLUMNS, ()),
    ):
        if not batch:
            continue
        table = cast(Table, Job.__table__)  # Core: one executemany, not the ORM bulk path
        stmt = (
            update(table)
            .where(table.c.id == bindparam("b_id"), table.c.status == bindparam("b_status"))
            .values({c: bindparam(f"b_{c}") for c in (*columns, *extra)})
        )
        session.connection().execute(stmt, batch)
    if plan.deferred:  # the queued jobs past the depth, not marked stale yet
        stale = sorted(i for i in stored.not_stale if i not in queued)
        for k in range(0, len(stale), 5000):  # bounded IN lists
            session.execute(
                update(Job)
                .where(Job.id.in_(stale[k : k + 5000]), Job.status == JobStatus.QUEUED)
                .values(queue_stale=True)
                .execution_options(synchronize_session=False)
            )
        written.update((i, {"queue_stale": True}) for i in stale)
    session.flush()
    return written


def mark_unreachable(session: Session, *, reason: str) -> dict[str, str]:
    """The cluster could not be read this tick: every queued job waits with ``reason``
    (positions and ETAs are kept). Returns job id -> reason for the jobs it touched."""
    reason = reason[:500]
    ids = session.execute(
        update(Job)
        .where(Job.status == JobStatus.QUEUED, Job.pending_reason.is_distinct_from(reason))
        .values(pending_reason=reason)
        .returning(Job.id)
        .execution_options(synchronize_session=False)
    ).scalars()
    return dict.fromkeys(ids, reason)
