"""Scheduling metrics for Prometheus, read from the database at scrape time (so every API
replica reports the same figures) plus the in-process scheduler's tick counters.

- ``shunter_team_jobs{team,state}``: queued / running jobs per team
- ``shunter_team_gpus_held{team}``, ``shunter_team_cpus_held{team}``
- ``shunter_team_share{team}``: dominant share held; ``shunter_team_fair_share{team}``: the
  team's weight over the weights of the teams with demand
- ``shunter_team_owed_share_seconds{team}``: the fair-share owed account (share-seconds the
  team is owed; negative: it owes), which orders the queue (``service.scheduler.owed``)
- ``shunter_job_wait_seconds``: histogram of submit -> first claim (jobs of the last day)
- ``shunter_preemptions_total``: checkpoint-now requests for preemption
- ``shunter_scheduler_leader{holder,epoch}``: 1 for the lease holder
- ``shunter_scheduler_ticks_total``, ``shunter_scheduler_reservations_total``,
  ``shunter_scheduler_tick_seconds``: this process's scheduler, when it runs here
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.models import Attempt, Event, Job, SchedulerLease, Team
from service.db.sqltime import as_utc
from shunter.jobspec.vocab import ACTIVE_STATUSES

__all__ = ["SchedulingCollector"]

_WAIT_BUCKETS = (10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)
_RUNNING = tuple(sorted(ACTIVE_STATUSES))


class SchedulingCollector(Collector):
    def __init__(self, db: Any, scheduler: Callable[[], Any] | None = None) -> None:
        self.db = db
        self.scheduler = scheduler or (lambda: None)

    def collect(self) -> Iterator[Metric]:
        yield from self.db.read(self._from_db)
        sched = self.scheduler()
        if sched is not None:
            stats = sched.stats
            yield CounterMetricFamily(
                "shunter_scheduler_ticks", "Scheduler ticks run here", value=stats.ticks
            )
            yield CounterMetricFamily(
                "shunter_scheduler_reservations",
                "Ticks that held a reservation for a blocked job",
                value=stats.reservations,
            )
            yield GaugeMetricFamily(
                "shunter_scheduler_tick_seconds", "Last tick's duration", value=stats.last_tick_s
            )

    def _from_db(self, s: Session) -> list[Metric]:
        team_rows = list(s.execute(select(Team)).scalars())
        teams = {t.name: t.weight for t in team_rows}
        owed = GaugeMetricFamily(
            "shunter_team_owed_share_seconds", "Fair-share owed account", labels=["team"]
        )
        for t in sorted(team_rows, key=lambda t: t.name):
            owed.add_metric([t.name], t.owed_s)
        rows = s.execute(
            select(
                Job.team,
                Job.status,
                func.count(),
                func.sum(Job.num_workers * Job.gpus_per_worker),
                func.sum(Job.num_workers * Job.cpus_per_worker),
            )
            .where(Job.status.in_(["queued", *_RUNNING]))
            .group_by(Job.team, Job.status)
        ).all()
        jobs = GaugeMetricFamily("shunter_team_jobs", "Jobs per team", labels=["team", "state"])
        gpus = GaugeMetricFamily("shunter_team_gpus_held", "GPUs held", labels=["team"])
        cpus = GaugeMetricFamily("shunter_team_cpus_held", "CPUs held", labels=["team"])
        share = GaugeMetricFamily("shunter_team_share", "Dominant share held", labels=["team"])
        fair = GaugeMetricFamily("shunter_team_fair_share", "Weight share", labels=["team"])
        count: dict[tuple[str, str], int] = {}
        held: dict[str, list[float]] = {}
        for team, status, n, g, c in rows:
            state = "queued" if status == "queued" else "running"
            count[(team, state)] = count.get((team, state), 0) + int(n)
            if state == "running":
                h = held.setdefault(team, [0.0, 0.0])
                h[0] += float(g or 0)
                h[1] += float(c or 0)
        total_g = sum(h[0] for h in held.values()) or 0.0
        total_c = sum(h[1] for h in held.values()) or 0.0
        demanding = {t for t, _ in count}
        wsum = sum(teams.get(t, 1.0) for t in demanding)
        for team in sorted(teams):
            for state in ("queued", "running"):
                jobs.add_metric([team, state], count.get((team, state), 0))
            hg, hc = held.get(team, [0.0, 0.0])
            gpus.add_metric([team], hg)
            cpus.add_metric([team], hc)
            dominant = max(hg / total_g if total_g else 0.0, hc / total_c if total_c else 0.0)
            share.add_metric([team], dominant)
            fair.add_metric([team], teams[team] / wsum if team in demanding and wsum else 0.0)
        return [jobs, gpus, cpus, share, fair, owed, self._waits(s), *self._events(s)]

    def _waits(self, s: Session) -> Metric:
        since = datetime.now(UTC) - timedelta(days=1)
        rows = s.execute(
            select(Job.created_at, Attempt.started_at)
            .join(Attempt, Attempt.job_id == Job.id)
            .where(Attempt.number == 1, Attempt.started_at > since)
        ).all()
        waits = [(as_utc(b) - as_utc(a)).total_seconds() for a, b in rows]
        buckets = [(f"{b:g}", sum(1 for w in waits if w <= b)) for b in _WAIT_BUCKETS]
        buckets.append(("+Inf", len(waits)))
        return HistogramMetricFamily(
            "shunter_job_wait_seconds",
            "Submit to first claim, jobs claimed in the last day",
            buckets=buckets,
            sum_value=sum(waits),
        )

    def _events(self, s: Session) -> list[Metric]:
        n = s.execute(
            select(func.count()).select_from(Event).where(Event.type == "preempt_requested")
        ).scalar_one()
        out: list[Metric] = [
            CounterMetricFamily("shunter_preemptions", "Preemption requests", value=int(n))
        ]
        leader = GaugeMetricFamily(
            "shunter_scheduler_leader", "The scheduler lease holder", labels=["holder", "epoch"]
        )
        lease = s.get(SchedulerLease, "scheduler")
        if lease is not None:
            leader.add_metric([lease.holder, str(lease.epoch)], 1)
        out.append(leader)
        return out
