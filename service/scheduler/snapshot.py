"""The database and the launcher's cluster view -> one ``policy.Snapshot``.

Shared by the live loop and anything that shows the loop's decisions. Reads, per tick:
queued and active jobs, their attempts (run time so far, when each re-entered the queue,
checkpoint-now requests), each running attempt's step rate from its metric points, and each
team's weight, quota and decayed usage history (``policy.fairshare.decayed_average`` over its
attempts' run intervals, half-life ``SHUNTER_FAIRSHARE_HALF_LIFE_S``). ``now`` is the
database clock, the clock attempts are stamped with.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from service.db.models import ACTIVE, Attempt, Job, MetricPoint, Team
from service.db.sqltime import utcnow
from service.jobs.states import ACTIVE_STATES, JobStatus
from service.launch import ClusterResources
from service.scheduler.policy import capacity
from service.scheduler.policy.eta import running_end
from service.scheduler.policy.fairshare import RunInterval, decayed_average, dominant_share
from service.scheduler.policy.snapshot import (
    ActiveJob,
    QueueEntry,
    Snapshot,
    TeamQuota,
    TeamState,
)

__all__ = ["build_snapshot", "db_now"]

# History older than this many half-lives weighs < 0.1% and is not read.
_HISTORY_HALF_LIVES = 10


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t


def db_now(session: Session) -> datetime:
    return _utc(session.execute(select(utcnow())).scalar_one())


def _entry(job: Job, *, run_s: float, queued_since: datetime | None) -> QueueEntry:
    spec: dict[str, Any] = job.spec or {}
    runtime = spec.get("max_runtime_seconds")
    return QueueEntry(
        job_id=job.id,
        team=job.team,
        priority=job.priority,
        created_at=_utc(job.created_at),
        num_workers=job.num_workers,
        cpus_per_worker=job.cpus_per_worker,
        gpus_per_worker=job.gpus_per_worker,
        queued_since=queued_since,
        max_runtime_s=float(runtime) if runtime is not None else None,
        run_s=run_s,
        preemptible=bool((spec.get("scheduling") or {}).get("preemptible", True)),
    )


def _attempts(session: Session, job_ids: Sequence[str]) -> dict[str, list[Attempt]]:
    out: dict[str, list[Attempt]] = defaultdict(list)
    if job_ids:
        rows = session.execute(
            select(Attempt).where(Attempt.job_id.in_(job_ids)).order_by(Attempt.number)
        ).scalars()
        for a in rows:
            out[a.job_id].append(a)
    return out


def _step_rate(session: Session, job_id: str, attempt: int) -> float | None:
    """Steps per second over this attempt's metric points; None until two distinct steps."""
    lo, hi, t0, t1 = session.execute(
        select(
            func.min(MetricPoint.step),
            func.max(MetricPoint.step),
            func.min(MetricPoint.time),
            func.max(MetricPoint.time),
        ).where(MetricPoint.job_id == job_id, MetricPoint.attempt == attempt)
    ).one()
    if lo is None or hi is None or hi <= lo or t0 is None or t1 is None:
        return None
    seconds = (_utc(t1) - _utc(t0)).total_seconds()
    return (hi - lo) / seconds if seconds > 0 else None


def _history(
    session: Session, *, now: datetime, half_life_s: float, cluster: ClusterResources
) -> dict[str, float]:
    """Team -> decayed average dominant share of the cluster over its attempts."""
    horizon = now - timedelta(seconds=_HISTORY_HALF_LIVES * half_life_s)
    rows = session.execute(
        select(
            Job.team,
            Attempt.started_at,
            Attempt.ended_at,
            Job.num_workers,
            Job.cpus_per_worker,
            Job.gpus_per_worker,
        )
        .join(Job, Job.id == Attempt.job_id)
        .where(or_(Attempt.ended_at.is_(None), Attempt.ended_at > horizon))
    ).all()
    per_team: dict[str, list[RunInterval]] = defaultdict(list)
    for team, started, ended, n, cpw, gpw in rows:
        per_team[team].append(
            RunInterval(
                start_s=_utc(started).timestamp(),
                end_s=None if ended is None else _utc(ended).timestamp(),
                cpus=n * cpw,
                gpus=n * gpw,
            )
        )
    total_cpus = sum(n.total_cpus for n in cluster.nodes if n.alive)
    total_gpus = sum(n.total_gpus for n in cluster.nodes if n.alive)
    out = {}
    for team, ivs in per_team.items():
        cpus, gpus = decayed_average(ivs, now_s=now.timestamp(), half_life_s=half_life_s)
        out[team] = dominant_share(cpus, gpus, total_cpus=total_cpus, total_gpus=total_gpus)
    return out


def build_snapshot(session: Session, *, cluster: ClusterResources, half_life_s: float) -> Snapshot:
    """One consistent view for ``policy.plan`` (one read transaction)."""
    now = db_now(session)
    statuses = [str(JobStatus.QUEUED), *(str(s) for s in ACTIVE_STATES)]
    jobs = list(session.execute(select(Job).where(Job.status.in_(statuses))).scalars())
    attempts = _attempts(session, [j.id for j in jobs])
    queued: list[QueueEntry] = []
    active: list[ActiveJob] = []
    for job in sorted(jobs, key=lambda j: j.id):
        done = [a for a in attempts[job.id] if a.status != ACTIVE and a.ended_at is not None]
        run_s = sum(
            (_utc(a.ended_at) - _utc(a.started_at)).total_seconds() for a in done if a.ended_at
        )
        last_end = max((_utc(a.ended_at) for a in done if a.ended_at), default=None)
        entry = _entry(job, run_s=run_s, queued_since=last_end)
        if job.status == JobStatus.QUEUED:
            queued.append(entry)
            continue
        current = next((a for a in attempts[job.id] if a.status == ACTIVE), None)
        started = _utc(current.started_at) if current is not None else now
        steps_left = None
        if job.progress_total_steps is not None:
            steps_left = job.progress_total_steps - (job.progress_step or 0)
        rate = _step_rate(session, job.id, current.number) if current is not None else None
        end = running_end(
            now=now,
            started_at=started,
            steps_per_s=rate,
            steps_left=steps_left,
            max_runtime_s=entry.max_runtime_s,
            run_s_before=run_s,
        )
        stopping = current is not None and current.stop_requested_at is not None
        active.append(
            ActiveJob(entry=entry, started_at=started, expected_end_at=end, preempting=stopping)
        )
    history = _history(session, now=now, half_life_s=half_life_s, cluster=cluster)
    teams = {
        t.name: TeamState(
            weight=t.weight,
            quota=TeamQuota(
                max_gpus=t.max_gpus, max_cpus=t.max_cpus, max_running_jobs=t.max_running_jobs
            ),
            history_share=history.get(t.name, 0.0),
            owed_s=t.owed_s,
        )
        for t in session.execute(select(Team)).scalars()
    }
    return Snapshot(
        now=now,
        totals=capacity.totals(cluster.nodes),
        free=capacity.free_now(cluster.nodes, [a.entry for a in active]),
        queued=queued,
        active=active,
        teams=teams,
    )
