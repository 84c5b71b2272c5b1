"""Straggler-watch metrics, read from the database at scrape time (every API process reports
the same), per job for the jobs starting or running now:

- ``shunter_job_rank_compute_seconds{job,rank}`` and ``shunter_job_rank_wait_seconds{job,rank}``:
  each rank's mean compute and wait time per step over the job's latest window
  (``trainer_core.step_timing``);
- ``shunter_job_window_throughput{job,unit}``: the latest window's samples/s and tokens/s;
- ``shunter_job_straggler_events_total{job,type}``: its ``straggler`` and
  ``throughput_dropped`` events so far;

and per node: ``shunter_node_straggler_flags_total{node,ip}`` and ``shunter_node_cordoned``
(1 while the node is cordoned: placement leaves it out).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.engine import Database
from service.db.models import Event, Job, NodeCordon, utcnow_py
from service.jobs.states import JobStatus
from service.jobs.straggler_rule import RANK_METRIC, THROUGHPUT_METRICS

__all__ = ["StragglerCollector"]

_ACTIVE = (str(JobStatus.STARTING), str(JobStatus.RUNNING))
_EVENTS = ("straggler", "throughput_dropped")


class StragglerCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        def read(s: Session) -> tuple[Any, Any, Any]:
            jobs = s.execute(
                select(Job.id, Job.latest_metrics).where(Job.status.in_(_ACTIVE))
            ).all()
            events = s.execute(
                select(Event.job_id, Event.type, func.count())
                .join(Job, Job.id == Event.job_id)
                .where(Job.status.in_(_ACTIVE), Event.type.in_(_EVENTS))
                .group_by(Event.job_id, Event.type)
            ).all()
            nodes = s.execute(select(NodeCordon)).scalars().all()
            return jobs, events, nodes

        jobs, events, nodes = self.db.read(read)
        compute = GaugeMetricFamily(
            "shunter_job_rank_compute_seconds",
            "Mean forward (compute) seconds per step of each rank over the latest window",
            labels=["job", "rank"],
        )
        wait = GaugeMetricFamily(
            "shunter_job_rank_wait_seconds",
            "Mean wait seconds per step (step - compute) of each rank over the latest window",
            labels=["job", "rank"],
        )
        throughput = GaugeMetricFamily(
            "shunter_job_window_throughput",
            "The latest window's throughput (unit: samples_per_s, tokens_per_s)",
            labels=["job", "unit"],
        )
        for job_id, latest in jobs:
            for name, value in (latest or {}).items():
                if not isinstance(value, int | float):
                    continue
                if (m := RANK_METRIC.match(name)) is not None:
                    fam = compute if m.group(2) == "compute_s" else wait
                    fam.add_metric([job_id, m.group(1)], float(value))
                elif name in THROUGHPUT_METRICS:
                    throughput.add_metric([job_id, name.removeprefix("window/")], float(value))
        yield from (compute, wait, throughput)
        counts = CounterMetricFamily(
            "shunter_job_straggler_events",
            "straggler and throughput_dropped events of the jobs starting or running now",
            labels=["job", "type"],
        )
        for job_id, kind, n in events:
            counts.add_metric([job_id, kind], int(n))
        yield counts
        flags = CounterMetricFamily(
            "shunter_node_straggler_flags",
            "straggler events that named the node",
            labels=["node", "ip"],
        )
        cordoned = GaugeMetricFamily(
            "shunter_node_cordoned",
            "1 while the node is cordoned for stragglers (left out of placement)",
            labels=["node", "ip"],
        )
        now = utcnow_py()
        for n in nodes:
            until = n.cordoned_until
            if until is not None and until.tzinfo is None:
                until = until.replace(tzinfo=UTC)
            labels = [n.node_id, n.node_ip]
            flags.add_metric(labels, int(n.total_flags))
            cordoned.add_metric(labels, 1.0 if until is not None and until > now else 0.0)
        yield flags
        yield cordoned
