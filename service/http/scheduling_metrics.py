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
from sqlalchemy.orm import Session

from service.jobs import counts
from shunter.jobspec.vocab import EventType

__all__ = ["SchedulingCollector"]

_WAIT_BUCKETS = (10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


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
        team_rows = counts.team_rows(s)
        teams = {t.name: t.weight for t in team_rows}
        owed = GaugeMetricFamily(
            "shunter_team_owed_share_seconds", "Fair-share owed account", labels=["team"]
        )
        for t in team_rows:
            owed.add_metric([t.name], t.owed_s)
        jobs = GaugeMetricFamily("shunter_team_jobs", "Jobs per team", labels=["team", "state"])
        gpus = GaugeMetricFamily("shunter_team_gpus_held", "GPUs held", labels=["team"])
        cpus = GaugeMetricFamily("shunter_team_cpus_held", "CPUs held", labels=["team"])
        share = GaugeMetricFamily("shunter_team_share", "Dominant share held", labels=["team"])
        fair = GaugeMetricFamily("shunter_team_fair_share", "Weight share", labels=["team"])
        held_rows = counts.teams_held(s)
        count = {(h.team, h.state): h.jobs for h in held_rows}
        held = {h.team: (h.gpus, h.cpus) for h in held_rows if h.state == "running"}
        total_g = sum(g for g, _ in held.values())
        total_c = sum(c for _, c in held.values())
        demanding = {t for t, _ in count}
        wsum = sum(teams.get(t, 1.0) for t in demanding)
        for team in sorted(teams):
            for state in ("queued", "running"):
                jobs.add_metric([team, state], count.get((team, state), 0))
            hg, hc = held.get(team, (0.0, 0.0))
            gpus.add_metric([team], hg)
            cpus.add_metric([team], hc)
            dominant = max(hg / total_g if total_g else 0.0, hc / total_c if total_c else 0.0)
            share.add_metric([team], dominant)
            fair.add_metric([team], teams[team] / wsum if team in demanding and wsum else 0.0)
        return [jobs, gpus, cpus, share, fair, owed, self._waits(s), *self._events(s)]

    def _waits(self, s: Session) -> Metric:
        waits = counts.first_claim_waits(s, since=datetime.now(UTC) - timedelta(days=1))
        buckets = [(f"{b:g}", sum(1 for w in waits if w <= b)) for b in _WAIT_BUCKETS]
        buckets.append(("+Inf", len(waits)))
        return HistogramMetricFamily(
            "shunter_job_wait_seconds",
            "Submit to first claim, jobs claimed in the last day",
            buckets=buckets,
            sum_value=sum(waits),
        )

    def _events(self, s: Session) -> list[Metric]:
        n = counts.event_counts(s, [EventType.PREEMPT_REQUESTED])[EventType.PREEMPT_REQUESTED]
        out: list[Metric] = [
            CounterMetricFamily("shunter_preemptions", "Preemption requests", value=n)
        ]
        leader = GaugeMetricFamily(
            "shunter_scheduler_leader", "The scheduler lease holder", labels=["holder", "epoch"]
        )
        lease = counts.scheduler_lease(s)
        if lease is not None:
            leader.add_metric([lease[0], str(lease[1])], 1)
        out.append(leader)
        return out
