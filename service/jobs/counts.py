"""Counts over jobs, teams and events that the metrics endpoint reports (read at scrape time,
so every API process reports the same figures). Read-only queries; the Prometheus shapes are
``service.http``'s (``prometheus``, ``scheduling_metrics``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.sqltime import as_utc
from service.db.tables import JOB_STATUSES, Attempt, Event, Job, SchedulerLease, Team
from shunter.jobspec.vocab import ACTIVE_STATUSES, EventType

__all__ = [
    "TeamHeld",
    "TeamRow",
    "event_counts",
    "first_claim_waits",
    "jobs_by_status",
    "scheduler_lease",
    "team_rows",
    "teams_held",
]


@dataclass(frozen=True)
class TeamRow:
    name: str
    weight: float
    owed_s: float


@dataclass(frozen=True)
class TeamHeld:
    """One team's queued or running (starting, running, cancelling) jobs and what they hold."""

    team: str
    state: str  # "queued" | "running"
    jobs: int
    gpus: float
    cpus: float


def jobs_by_status(session: Session) -> dict[str, int]:
    """Every job status, with 0 where there is no job."""
    rows = session.execute(select(Job.status, func.count()).group_by(Job.status)).all()
    return dict.fromkeys(JOB_STATUSES, 0) | {status: int(n) for status, n in rows}


def event_counts(session: Session, types: Iterable[EventType]) -> dict[str, int]:
    """Events of each of ``types`` over the jobs the database holds, 0 where none."""
    wanted = [str(t) for t in types]
    rows = session.execute(
        select(Event.type, func.count()).where(Event.type.in_(wanted)).group_by(Event.type)
    ).all()
    return dict.fromkeys(wanted, 0) | {t: int(n) for t, n in rows}


def team_rows(session: Session) -> list[TeamRow]:
    teams = session.execute(select(Team.name, Team.weight, Team.owed_s).order_by(Team.name))
    return [TeamRow(name, float(weight), float(owed)) for name, weight, owed in teams]


def teams_held(session: Session) -> list[TeamHeld]:
    """Per team and state: the jobs queued or running, and the GPUs and CPUs they ask for."""
    running = sorted(ACTIVE_STATUSES)
    rows = session.execute(
        select(
            Job.team,
            Job.status,
            func.count(),
            func.sum(Job.num_workers * Job.gpus_per_worker),
            func.sum(Job.num_workers * Job.cpus_per_worker),
        )
        .where(Job.status.in_(["queued", *running]))
        .group_by(Job.team, Job.status)
    ).all()
    out: dict[tuple[str, str], TeamHeld] = {}
    for team, status, n, g, c in rows:
        state = "queued" if status == "queued" else "running"
        was = out.get((team, state), TeamHeld(team, state, 0, 0.0, 0.0))
        out[(team, state)] = TeamHeld(
            team, state, was.jobs + int(n), was.gpus + float(g or 0), was.cpus + float(c or 0)
        )
    return list(out.values())


def first_claim_waits(session: Session, *, since: datetime) -> list[float]:
    """Seconds from submit to the first claim of the jobs first claimed after ``since``."""
    rows = session.execute(
        select(Job.created_at, Attempt.started_at)
        .join(Attempt, Attempt.job_id == Job.id)
        .where(Attempt.number == 1, Attempt.started_at > since)
    ).all()
    return [(as_utc(b) - as_utc(a)).total_seconds() for a, b in rows]


def scheduler_lease(session: Session) -> tuple[str, int] | None:
    """The scheduler lease's holder and epoch, or None before any scheduler ran."""
    lease = session.get(SchedulerLease, "scheduler")
    return None if lease is None else (lease.holder, int(lease.epoch))
