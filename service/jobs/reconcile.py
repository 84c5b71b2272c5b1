"""Reconcile active jobs with what the launcher (Ray) says about their attempts.

Used twice: once at service start-up (``reconcile_on_start``: every non-terminal job is
checked against Ray before the reaper runs, so a restart loses no job and kills no live one),
and every scheduler tick (``sweep_active``: catch drivers that died without reporting, finish
cancels once Ray has stopped the job).

``decide_active`` is the policy, a pure function table-tested in ``tests/worker``:

=====================  ========================  =========================================
job status             launcher state            action
=====================  ========================  =========================================
cancelling / cancel    pending, running          STOP (ask Ray to stop; check next tick)
cancelling / cancel    ended or unknown          FINISH_CANCELLED
starting / running     pending, running          KEEP (at start-up: and renew the lease)
starting / running     ended or unknown          LOSE (the driver ended without a terminal
                                                 report: attempt lost -> requeue per policy)
=====================  ========================  =========================================

A lost attempt goes through ``service.jobs.attempt_loss.lose_attempt`` (cause
``DRIVER_ENDED``): requeued (attempt + 1, resuming from the newest verified checkpoint) until
``max_infra_retries`` losses, then ``retries_exhausted``. The database is written first, then the
launcher is told to stop.

The Ray head lost (``HeadWatch``): while the launcher raises ``ClusterUnavailable`` the sweep
decides nothing (no job is lost or kept on what a head that is away cannot say). Once the
head answers again, each attempt that was active through the outage gets one
``ray_head_lost`` event that says what became of it:

- ``resumed``: Ray says its job ended or does not know it: lost with cause ``RAY_HEAD_LOST``,
  requeued from the newest verified checkpoint;
- ``survived``: Ray says it runs *and* its driver heartbeated after the head came back (GCS
  fault tolerance kept it). Ray's word alone is not enough: a head restarted on a Redis
  remembers the job as running until it notices, some seconds later, that its supervisor
  died with the old head's node; until then the verdict waits.

An attempt whose lease expires while the head is away is lost by the reaper with the same
cause (``service.scheduler.loop``).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.changes import KeptRows
from service.db.engine import Database
from service.db.sqltime import as_utc
from service.db.tables import ACTIVE, Attempt, Event, Job
from service.errors import IllegalTransition, StaleAttempt
from service.jobs.attempt_loss import HEAD_LOST_EVENT, LossCause, lose_attempt
from service.jobs.states import ACTIVE_STATES, ErrorInfo, JobStatus, fence_attempt, transition
from service.launch import ClusterUnavailable, Launcher, LaunchState
from shunter.jobspec.vocab import EventType

__all__ = [
    "ActiveAttempt",
    "Decision",
    "HeadWatch",
    "decide_active",
    "kept_active",
    "reconcile_on_start",
    "sweep_active",
]

log = logging.getLogger(__name__)

_LIVE = frozenset({LaunchState.PENDING, LaunchState.RUNNING})


class Decision(enum.StrEnum):
    KEEP = "keep"
    STOP = "stop"
    FINISH_CANCELLED = "finish_cancelled"
    LOSE = "lose"


def decide_active(*, status: JobStatus, cancel_requested: bool, launch: LaunchState) -> Decision:
    """What to do with one active job given its attempt's launcher state. Pure."""
    live = launch in _LIVE
    if status == JobStatus.CANCELLING or cancel_requested:
        return Decision.STOP if live else Decision.FINISH_CANCELLED
    return Decision.KEEP if live else Decision.LOSE


@dataclass(frozen=True, kw_only=True)
class ActiveAttempt:
    job_id: str
    status: JobStatus
    cancel_requested: bool
    attempt: int
    submission_id: str


_STATUS = {str(s): s for s in JobStatus}  # a lookup, not an enum call per row
# Every active job's active attempt (Core rows: every tick reads them all).
_ACTIVE = (
    select(Job.id, Job.status, Job.cancel_requested, Attempt.number, Attempt.submission_id)
    .join(Attempt, (Attempt.job_id == Job.id) & (Attempt.status == ACTIVE))
    .where(Job.status.in_([str(s) for s in ACTIVE_STATES]))
    .order_by(Job.id)
)


def _attempts(_session: Session, rows: Sequence[Any]) -> list[ActiveAttempt]:
    return [
        ActiveAttempt(
            job_id=r[0],
            status=_STATUS[r[1]],
            cancel_requested=bool(r[2]),
            attempt=r[3],
            submission_id=r[4],
        )
        for r in rows
    ]


def _active(session: Session) -> list[ActiveAttempt]:
    return _attempts(session, list(session.connection().execute(_ACTIVE)))


def kept_active() -> KeptRows[ActiveAttempt]:
    """The active attempts, kept across the scheduler's ticks: each sweep re-reads only the
    jobs changed since the last (``db.changes.KeptRows``)."""
    return KeptRows(_ACTIVE, _attempts)


def _finish_cancelled(session: Session, *, job_id: str, attempt: int) -> None:
    job = session.get(Job, job_id, populate_existing=True)
    if job is None or job.attempt != attempt:
        return
    if JobStatus(job.status) == JobStatus.STARTING:
        # starting cannot go straight to cancelled: pass through cancelling (one table).
        transition(
            session,
            job_id=job_id,
            to=JobStatus.CANCELLING,
            event_type=EventType.CANCEL_REQUESTED,
            message="cancel requested",
        )
    transition(
        session,
        job_id=job_id,
        to=JobStatus.CANCELLED,
        message="the job's Ray job has stopped",
        error=ErrorInfo(type="cancelled", message="cancelled by user"),
    )


_Key = tuple[str, int]  # (job id, attempt number)


@dataclass(kw_only=True)
class HeadWatch:
    """The scheduler's memory of a Ray head outage, across sweeps: since when the launcher
    has raised ``ClusterUnavailable`` (monotonic clock), and the attempts active through it
    whose verdict is still open, each with the lease it had when the head answered again
    (None while the head is away). One per scheduler; the scheduler's lock guards it."""

    away_since: float | None = None
    away_s: float = 0.0  # how long the last outage lasted
    pending: dict[_Key, datetime | None] = field(default_factory=dict)

    def away(self, active: Sequence[ActiveAttempt]) -> None:
        if self.away_since is None:
            self.away_since = time.monotonic()
            log.warning("the Ray head does not answer; deciding nothing until it does")
        for a in active:
            self.pending[(a.job_id, a.attempt)] = None  # a heartbeat must come after it

    def back(self) -> None:
        if self.away_since is not None:
            self.away_s = time.monotonic() - self.away_since
            self.away_since = None
            log.warning("the Ray head answers again after %.1f s", self.away_s)


def _leases(session: Session, keys: set[_Key]) -> dict[_Key, datetime]:
    jobs = {k[0] for k in keys}
    rows = session.execute(
        select(Attempt.job_id, Attempt.number, Attempt.lease_expires_at).where(
            Attempt.job_id.in_(jobs), Attempt.status == ACTIVE
        )
    )
    return {(r[0], r[1]): as_utc(r[2]) for r in rows if (r[0], r[1]) in keys}


def sweep_active(
    db: Database,
    launcher: Launcher,
    *,
    max_infra_retries: int,
    renew_lease_s: float | None = None,
    kept: KeptRows[ActiveAttempt] | None = None,
    head: HeadWatch | None = None,
) -> dict[str, Decision]:
    """Apply ``decide_active`` to every active job; return the decision per job id.

    ``renew_lease_s``: at start-up, extend the lease of attempts Ray still runs (their drivers
    could not heartbeat while the service was down). ``kept``: the active attempts as the
    last sweep read them (``kept_active``), brought up to date instead of read again.
    ``head``: the outage memory (``HeadWatch``); after an outage, an attempt active through
    it gets a ``ray_head_lost`` event (``survived``), or is lost with cause ``RAY_HEAD_LOST``.
    """
    out: dict[str, Decision] = {}
    active = db.read(_active) if kept is None else kept.fetch(db)
    try:
        states = launcher.statuses([a.submission_id for a in active])
    except ClusterUnavailable as e:  # the head is away: decide nothing about any job now
        if head is not None:
            head.away(active)
        log.info("launcher status of %d active jobs: %s", len(active), e)
        return out
    except Exception as e:  # Ray unreachable: decide nothing about any job now
        log.warning("launcher status of %d active jobs failed: %s", len(active), e)
        return out
    leases: dict[_Key, datetime] = {}
    if head is not None:
        head.back()
        live = {(a.job_id, a.attempt) for a in active}
        for gone in head.pending.keys() - live:  # reported, or reaped: nothing left to say
            del head.pending[gone]
        if head.pending:
            keys = set(head.pending)
            leases = db.read(lambda s: _leases(s, keys))
    for a in active:
        st = states[a.submission_id]
        d = decide_active(status=a.status, cancel_requested=a.cancel_requested, launch=st.state)
        out[a.job_id] = d
        key = (a.job_id, a.attempt)
        head_lost = head is not None and key in head.pending and d == Decision.LOSE
        try:
            if head is not None and key in head.pending:
                _verdict(db, head, a, d, leases.get(key))
            _apply(db, launcher, a, d, st.message, max_infra_retries, renew_lease_s,
                   head_lost=head_lost)  # fmt: skip
        except (IllegalTransition, StaleAttempt) as e:  # the job moved meanwhile: fine
            log.info("job %s moved while reconciling (%s): %s", a.job_id, d, e)
    return out


def _verdict(
    db: Database, head: HeadWatch, a: ActiveAttempt, d: Decision, lease: datetime | None
) -> None:
    """One attempt active through an outage, the head answering: lost with it (the caller
    loses it: ``resumed``), survived (Ray runs it and it heartbeated since), or not yet."""
    key = (a.job_id, a.attempt)
    if d != Decision.KEEP:  # lost with the head, or being cancelled: no survival to tell
        del head.pending[key]
        return
    seen = head.pending[key]
    if seen is None:  # the first answer: note its lease; a heartbeat will move it
        head.pending[key] = lease
        return
    if lease is not None and lease > seen:
        del head.pending[key]
        _survived(db, a, away_s=head.away_s)


def _survived(db: Database, a: ActiveAttempt, *, away_s: float) -> None:
    message = (
        f"survived: the Ray head did not answer for {away_s:.0f} s; Ray still runs attempt "
        f"{a.attempt} (GCS fault tolerance) and its driver heartbeats: it goes on"
    )
    log.warning("job %s: %s", a.job_id, message)

    def write(s: Session) -> None:
        s.add(Event(job_id=a.job_id, type=HEAD_LOST_EVENT, attempt=a.attempt, message=message))

    db.write(write)


def _apply(
    db: Database,
    launcher: Launcher,
    a: ActiveAttempt,
    d: Decision,
    launch_message: str,
    max_infra_retries: int,
    renew_lease_s: float | None,
    *,
    head_lost: bool = False,
) -> None:
    if d == Decision.KEEP and renew_lease_s is not None:
        db.write(
            lambda s: fence_attempt(
                s, job_id=a.job_id, attempt=a.attempt, lease_seconds=renew_lease_s
            )
        )
    elif d == Decision.STOP:
        launcher.stop(a.submission_id)
    elif d == Decision.FINISH_CANCELLED:
        db.write(lambda s: _finish_cancelled(s, job_id=a.job_id, attempt=a.attempt))
    elif d == Decision.LOSE:
        detail = f"Ray job {a.submission_id}"
        if launch_message:
            detail += f" ({launch_message[:300]})"
        cause = LossCause.RAY_HEAD_LOST if head_lost else LossCause.DRIVER_ENDED
        db.write(
            lambda s: lose_attempt(
                s,
                job_id=a.job_id,
                attempt=a.attempt,
                cause=cause,
                detail=detail,
                max_infra_retries=max_infra_retries,
            )
        )
        launcher.stop(a.submission_id)  # no-op when it already ended


def reconcile_on_start(db: Database, launcher: Launcher, settings: Any) -> dict[str, Decision]:
    """Run once before the scheduler's first tick. Loses no job: live ones are kept (lease
    renewed), ended ones requeued per policy, cancels finished."""
    return sweep_active(
        db,
        launcher,
        max_infra_retries=int(settings.max_infra_retries),
        renew_lease_s=float(settings.lease_seconds),
    )
