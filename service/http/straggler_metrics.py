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

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from service.db.engine import Database
from service.db.tables import utcnow_py
from service.health.counts import straggler_view
from service.health.straggler_rule import RANK_METRIC, THROUGHPUT_METRICS

__all__ = ["StragglerCollector"]


_Family = type[GaugeMetricFamily] | type[CounterMetricFamily]

# The families this collector yields, in order: (kind, name, help, labels).
_FAMILIES: dict[str, tuple[_Family, str, str, tuple[str, ...]]] = {
    "compute": (
        GaugeMetricFamily,
        "shunter_job_rank_compute_seconds",
        "Mean forward (compute) seconds per step of each rank over the latest window",
        ("job", "rank"),
    ),
    "wait": (
        GaugeMetricFamily,
        "shunter_job_rank_wait_seconds",
        "Mean wait seconds per step (step - compute) of each rank over the latest window",
        ("job", "rank"),
    ),
    "throughput": (
        GaugeMetricFamily,
        "shunter_job_window_throughput",
        "The latest window's throughput (unit: samples_per_s, tokens_per_s)",
        ("job", "unit"),
    ),
    "events": (
        CounterMetricFamily,
        "shunter_job_straggler_events",
        "straggler and throughput_dropped events of the jobs starting or running now",
        ("job", "type"),
    ),
    "flags": (
        CounterMetricFamily,
        "shunter_node_straggler_flags",
        "straggler events that named the node",
        ("node", "ip"),
    ),
    "cordoned": (
        GaugeMetricFamily,
        "shunter_node_cordoned",
        "1 while the node is cordoned for stragglers (left out of placement)",
        ("node", "ip"),
    ),
}


class StragglerCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        view = self.db.read(lambda s: straggler_view(s, now=utcnow_py()))
        fam = {
            key: kind(name, doc, labels=list(ls))
            for key, (kind, name, doc, ls) in _FAMILIES.items()
        }
        for job_id, latest in view.latest:
            for name, value in latest.items():
                if not isinstance(value, int | float):
                    continue
                if (m := RANK_METRIC.match(name)) is not None:
                    key = "compute" if m.group(2) == "compute_s" else "wait"
                    fam[key].add_metric([job_id, m.group(1)], float(value))
                elif name in THROUGHPUT_METRICS:
                    unit = name.removeprefix("window/")
                    fam["throughput"].add_metric([job_id, unit], float(value))
        for job_id, kind, n in view.events:
            fam["events"].add_metric([job_id, kind], n)
        for node in view.nodes:
            labels = [node.node_id, node.node_ip]
            fam["flags"].add_metric(labels, node.total_flags)
            fam["cordoned"].add_metric(labels, 1.0 if node.cordoned else 0.0)
        yield from fam.values()
