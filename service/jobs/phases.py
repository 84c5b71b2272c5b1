"""Start-up phases of an attempt (issue #22): one ``phase`` event each, and how long it took.

``PHASES``, in order: ``claimed`` and ``launched`` (the scheduler: the claim committed, the
launcher accepted the submission), ``workers_up``, ``model_built`` and ``first_step`` (rank 0
of the training workers: it entered the training function; model, data and engine are built;
the first metrics report), ``succeeded`` (the driver's final status).

Each is one event of type ``phase`` per (job, attempt), at the time the phase was reached, with
the message ``"<phase>: <s> s after <previous>; <s> s since submit"``; the first report wins,
so a retried report writes nothing. ``record_phase`` returns the phase's own duration (from the
previous phase this attempt recorded, or for the first one from when the job last became
``queued``) for the ``shunter_job_phase_seconds{phase}`` histogram of the process that wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.sqltime import as_utc
from service.db.tables import Event, Job, utcnow_py
from service.jobs.states import fence_attempt
from shunter.jobspec.vocab import EventType

__all__ = ["PHASES", "WORKER_PHASES", "PhaseMark", "add_worker_phase", "record_phase"]

PHASES = ("claimed", "launched", "workers_up", "model_built", "first_step", "succeeded")
WORKER_PHASES = ("workers_up", "model_built", "first_step")  # what rank 0 reports


@dataclass(frozen=True, kw_only=True)
class PhaseMark:
    phase: str
    seconds: float  # since the previous phase (>= 0)


def record_phase(
    session: Session, *, job_id: str, attempt: int, phase: str, at: datetime | None = None
) -> PhaseMark | None:
    """Write the ``phase`` event of this attempt (None: it already has one). ``at`` (default
    now) is clamped to now: a worker's clock may run ahead of the database's host."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; one of {PHASES}")
    now = utcnow_py()
    at = min(as_utc(at), now) if at is not None else now
    rows = session.execute(
        select(Event.message, Event.time).where(
            Event.job_id == job_id, Event.attempt == attempt, Event.type == "phase"
        )
    ).all()
    done = {message.split(":", 1)[0]: as_utc(t) for message, t in rows}
    if phase in done:
        return None
    prev_name, prev_at = "queued", _queued_at(session, job_id)
    for name in PHASES[: PHASES.index(phase)]:
        if name in done:
            prev_name, prev_at = name, done[name]
    created = session.execute(select(Job.created_at).where(Job.id == job_id)).scalar_one()
    seconds = max(0.0, (at - prev_at).total_seconds())
    since_submit = max(0.0, (at - as_utc(created)).total_seconds())
    session.add(
        Event(
            job_id=job_id,
            time=at,
            type=EventType.PHASE,
            attempt=attempt,
            message=(
                f"{phase}: {seconds:.2f} s after {prev_name}; {since_submit:.2f} s since submit"
            ),
        )
    )
    return PhaseMark(phase=phase, seconds=seconds)


def _queued_at(session: Session, job_id: str) -> datetime:
    """When the job last entered ``queued`` (its submit, or a requeue before this attempt)."""
    got = session.execute(
        select(func.max(Event.time)).where(Event.job_id == job_id, Event.to_status == "queued")
    ).scalar_one_or_none()
    if got is None:
        got = session.execute(select(Job.created_at).where(Job.id == job_id)).scalar_one()
    return as_utc(got)


def add_worker_phase(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    phase: str,
    at: datetime,
    lease_seconds: float,
) -> PhaseMark | None:
    """``POST .../phases`` from rank 0: fenced like every internal write."""
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    return record_phase(session, job_id=job_id, attempt=attempt, phase=phase, at=at)
