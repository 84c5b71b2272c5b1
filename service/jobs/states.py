"""Job states: the one table of legal moves, the one function that performs a move, the claim,
and the attempt lease (heartbeat, expiry). What a lost attempt does to its job is
``service.jobs.attempt_loss``.

``transition`` is the only writer of ``jobs.status`` apart from ``claim_job`` (queued ->
starting, one compare-and-set). Every move is a conditional ``UPDATE ... WHERE status = <the
status just read>`` plus an event row, in the caller's transaction; a move the table forbids,
or one that loses a race, raises ``IllegalTransition``. Moving a job out of the active states
(to ``queued`` or a terminal state) closes its active attempt in the same transaction, so
"an active attempt exists" <=> "the job is starting/running/cancelling".

Leases are judged on the database clock (``utcnow()`` in SQL), never the host's.

Webhooks: every event row written here (or anywhere) is turned into its outbox rows in the
same transaction by ``service.webhooks.outbox``'s hook on ``Event``, imported below.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.db.sqltime import utcnow, utcnow_plus
from service.db.tables import ACTIVE, Attempt, Event, Job, utcnow_py
from service.errors import IllegalTransition, NotFound, StaleAttempt
from service.webhooks import outbox as _outbox  # noqa: F401  (registers the Event hook)
from shunter.jobspec.elastic import stored_range
from shunter.jobspec.vocab import ACTIVE_STATUSES, TERMINAL_STATUSES, EventType

__all__ = [
    "ACTIVE_STATES",
    "LEGAL_MOVES",
    "TERMINAL",
    "ErrorInfo",
    "JobStatus",
    "can_move",
    "claim_job",
    "current_attempt",
    "expired_attempts",
    "fence_attempt",
    "heartbeat",
    "transition",
]


class JobStatus(enum.StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PAUSED = "paused"  # checkpointed and held on request; ``resume`` requeues it
    PRUNED = "pruned"  # a sweep's trial stopped early by its pruner; an end, not a failure


S = JobStatus
# The typed view of ``shunter.jobspec.vocab``'s statuses (a test keeps the two equal); the
# groups are vocab's.
TERMINAL = frozenset(S(s) for s in TERMINAL_STATUSES)
ACTIVE_STATES = frozenset(S(s) for s in ACTIVE_STATUSES)

# Every legal move. DESIGN.md "Job states", plus: starting -> failed (launch error or a user
# error before the first step), starting -> cancelling (cancel while launching), and
# failed|cancelled -> queued, which only ``resume`` performs. A succeeded job never moves.
# Pause (``service.jobs.checkpoint_now``): queued -> paused at once; starting|running -> paused
# once the attempt checkpointed (or its checkpoint timed out); paused -> queued by ``resume``,
# paused -> cancelled by ``cancel``. A preemption is running|starting -> queued.
LEGAL_MOVES: Mapping[JobStatus, frozenset[JobStatus]] = {
    S.QUEUED: frozenset({S.STARTING, S.CANCELLED, S.PAUSED, S.PRUNED}),
    S.STARTING: frozenset({S.RUNNING, S.QUEUED, S.FAILED, S.CANCELLING, S.PAUSED, S.PRUNED}),
    S.RUNNING: frozenset(
        {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.CANCELLING, S.QUEUED, S.PAUSED, S.PRUNED}
    ),
    S.CANCELLING: frozenset({S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset({S.QUEUED}),
    S.CANCELLED: frozenset({S.QUEUED}),
    S.PAUSED: frozenset({S.QUEUED, S.CANCELLED, S.PRUNED}),
    S.PRUNED: frozenset(),
}

# How the active attempt ends when its job leaves the active states.
_ATTEMPT_END = {
    S.SUCCEEDED: "succeeded",
    S.FAILED: "failed",
    S.CANCELLED: "cancelled",
    S.QUEUED: "lost",
    S.PAUSED: "preempted",
    S.PRUNED: "preempted",
}


@dataclass(frozen=True, kw_only=True)
class ErrorInfo:
    """Machine-readable ``type`` (spec_invalid, user_error, oom, infra_lost, ...) + message."""

    type: str
    message: str


def can_move(source: JobStatus | str, target: JobStatus | str) -> bool:
    return JobStatus(target) in LEGAL_MOVES[JobStatus(source)]


def transition(
    session: Session,
    *,
    job_id: str,
    to: JobStatus,
    expect_from: frozenset[JobStatus] | set[JobStatus] | None = None,
    event_type: EventType | None = None,
    message: str = "",
    error: ErrorInfo | None = None,
    values: Mapping[str, Any] | None = None,
) -> Job:
    """Move one job to ``to``; write the event; return the updated job.

    ``expect_from`` narrows the legal sources (e.g. cancel only from queued). ``values`` are
    extra columns set in the same UPDATE. Raises ``NotFound`` or ``IllegalTransition``.
    """
    current = session.execute(select(Job.status).where(Job.id == job_id)).scalar_one_or_none()
    if current is None:
        raise NotFound(f"job {job_id} not found")
    source = JobStatus(current)
    if not can_move(source, to) or (expect_from is not None and source not in expect_from):
        raise IllegalTransition(f"job {job_id} is {source}; it cannot move to {to}")
    cols: dict[str, Any] = {"status": str(to), "updated_at": utcnow_py(), **(values or {})}
    if to in (S.QUEUED, S.PAUSED) and "num_workers" not in cols:
        # An elastic job waits at min (its width was its last attempt's while it ran).
        spec = session.execute(select(Job.spec).where(Job.id == job_id)).scalar_one()
        workers = stored_range((spec or {}).get("resources") or {})
        if workers is not None:
            cols["num_workers"] = workers[0]
    if to == S.RUNNING:
        cols.setdefault("started_at", utcnow())
    if to in TERMINAL:
        cols.setdefault("finished_at", utcnow())
    if error is not None:
        cols["error_type"], cols["error_message"] = error.type, error.message
    done = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == str(source))
        .values(**cols)
        .execution_options(synchronize_session=False)
    )
    if done.rowcount != 1:  # type: ignore[attr-defined]
        raise IllegalTransition(f"job {job_id} changed concurrently; {source} -> {to} lost")
    if to in _ATTEMPT_END:
        session.execute(
            update(Attempt)
            .where(Attempt.job_id == job_id, Attempt.status == ACTIVE)
            .values(status=_ATTEMPT_END[to], ended_at=utcnow(), end_reason=message or str(to))
            .execution_options(synchronize_session=False)
        )
    job = session.get(Job, job_id, populate_existing=True)
    assert job is not None
    session.add(
        Event(
            job_id=job_id,
            from_status=str(source),
            to_status=str(to),
            type=event_type or EventType(str(to)),
            message=message or (error.message if error else ""),
            attempt=job.attempt or None,
        )
    )
    session.flush()
    return job


def claim_job(
    session: Session,
    *,
    job_id: str,
    token_hash: str,
    lease_seconds: float = 30.0,
    num_workers: int | None = None,
) -> Attempt | None:
    """Claim a queued job: ONE compare-and-set ``queued -> starting, attempt += 1``.

    ``num_workers``: the width the attempt runs at (an elastic job's, decided by the
    scheduler); recorded on the attempt and as the job's width while it runs.

    Returns the new active attempt, or ``None`` if the job was not queued (someone else won).
    Safe on SQLite and PostgreSQL without ``FOR UPDATE``: the ``WHERE status = 'queued'`` is
    re-evaluated under the row lock, so exactly one concurrent claimer updates a row.
    """
    number = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == str(S.QUEUED))
        .values(
            status=str(S.STARTING),
            attempt=Job.attempt + 1,
            pending_reason=None,
            queue_position=None,
            cancel_requested=False,
            restarts=0,  # max_restarts bounds the restarts of one attempt
            updated_at=utcnow_py(),
            **({} if num_workers is None else {"num_workers": num_workers}),
        )
        .returning(Job.attempt)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if number is None:
        return None
    attempt = Attempt(
        job_id=job_id,
        number=number,
        status=ACTIVE,
        token_hash=token_hash,
        submission_id=f"{job_id}-{number}",
        lease_expires_at=utcnow_plus(lease_seconds),
        started_at=utcnow(),
        num_workers=num_workers,
    )
    session.add(attempt)
    session.add(
        Event(
            job_id=job_id,
            from_status="queued",
            to_status="starting",
            type=EventType.CLAIMED,
            message=f"attempt {number} claimed"
            + ("" if num_workers is None else f" on {num_workers} workers"),
            attempt=number,
        )
    )
    session.flush()
    session.refresh(attempt)  # load the database-clock times
    return attempt


def current_attempt(session: Session, *, job_id: str) -> Attempt | None:
    """The job's active attempt, if any (at most one, by constraint)."""
    return session.execute(
        select(Attempt).where(Attempt.job_id == job_id, Attempt.status == ACTIVE)
    ).scalar_one_or_none()


def fence_attempt(session: Session, *, job_id: str, attempt: int, lease_seconds: float) -> datetime:
    """Prove ``attempt`` is the job's active attempt and extend its lease; return the new expiry.

    The conditional UPDATE takes the attempt's row lock on PostgreSQL, so a concurrent
    ``loss.lose_attempt`` orders strictly before or after the caller's writes. Raises
    ``StaleAttempt`` (409) when the attempt is not active.
    """
    expires = session.execute(
        update(Attempt)
        .where(Attempt.job_id == job_id, Attempt.number == attempt, Attempt.status == ACTIVE)
        .values(lease_expires_at=utcnow_plus(lease_seconds))
        .returning(Attempt.lease_expires_at)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if expires is None:
        raise StaleAttempt(f"attempt {attempt} of job {job_id} is no longer the active attempt")
    return expires


def heartbeat(
    session: Session, *, job_id: str, attempt: int, lease_seconds: float
) -> tuple[datetime, bool]:
    """Extend the lease; return ``(lease_expires_at, cancel_requested)``."""
    expires = fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    cancel = session.execute(select(Job.cancel_requested).where(Job.id == job_id)).scalar_one()
    return expires, bool(cancel)


def expired_attempts(session: Session) -> list[Attempt]:
    """Active attempts whose lease ended, on the database clock (for the scheduler's reaper)."""
    rows = session.execute(
        select(Attempt)
        .where(Attempt.status == ACTIVE, Attempt.lease_expires_at < utcnow())
        .order_by(Attempt.id)
    )
    return list(rows.scalars())
