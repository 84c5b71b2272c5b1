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

A lost attempt goes through ``service.jobs.loss.lose_attempt`` (cause ``DRIVER_ENDED``): requeued
(attempt + 1, resuming from the newest verified checkpoint) until ``max_infra_retries`` losses,
then ``retries_exhausted``. The database is written first, then the launcher is told to stop.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.changes import KeptRows
from service.db.engine import Database
from service.db.models import ACTIVE, Attempt, Job
from service.errors import IllegalTransition, StaleAttempt
from service.jobs.loss import LossCause, lose_attempt
from service.jobs.states import ACTIVE_STATES, ErrorInfo, JobStatus, fence_attempt, transition
from service.launch import Launcher, LaunchState

__all__ = [
    "ActiveAttempt",
    "Decision",
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
        transition(session, job_id=job_id, to=JobStatus.CANCELLING, message="cancel requested")
    transition(
        session,
        job_id=job_id,
        to=JobStatus.CANCELLED,
        message="the job's Ray job has stopped",
        error=ErrorInfo(type="cancelled", message="cancelled by user"),
    )


def sweep_active(
    db: Database,
    launcher: Launcher,
    *,
    max_infra_retries: int,
    renew_lease_s: float | None = None,
    kept: KeptRows[ActiveAttempt] | None = None,
) -> dict[str, Decision]:
    """Apply ``decide_active`` to every active job; return the decision per job id.

    ``renew_lease_s``: at start-up, extend the lease of attempts Ray still runs (their drivers
    could not heartbeat while the service was down). ``kept``: the active attempts as the
    last sweep read them (``kept_active``), brought up to date instead of read again.
    """
    out: dict[str, Decision] = {}
    active = db.read(_active) if kept is None else kept.fetch(db)
    try:
        states = launcher.statuses([a.submission_id for a in active])
    except Exception as e:  # Ray unreachable: decide nothing about any job now
        log.warning("launcher status of %d active jobs failed: %s", len(active), e)
        return out
    for a in active:
        st = states[a.submission_id]
        d = decide_active(status=a.status, cancel_requested=a.cancel_requested, launch=st.state)
        out[a.job_id] = d
        try:
            _apply(db, launcher, a, d, st.message, max_infra_retries, renew_lease_s)
        except (IllegalTransition, StaleAttempt) as e:  # the job moved meanwhile: fine
            log.info("job %s moved while reconciling (%s): %s", a.job_id, d, e)
    return out


def _apply(
    db: Database,
    launcher: Launcher,
    a: ActiveAttempt,
    d: Decision,
    launch_message: str,
    max_infra_retries: int,
    renew_lease_s: float | None,
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
        db.write(
            lambda s: lose_attempt(
                s,
                job_id=a.job_id,
                attempt=a.attempt,
                cause=LossCause.DRIVER_ENDED,
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
