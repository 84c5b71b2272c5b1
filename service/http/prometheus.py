"""Prometheus metrics, one registry per app (tests build many apps in one process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from service.db.engine import Database
from service.http.scheduling_metrics import SchedulingCollector
from service.jobs import counts
from service.jobs.phases import PhaseMark
from shunter.jobspec.vocab import EventType

__all__ = ["AppMetrics", "build_metrics"]


class _JobsByStatus(Collector):
    """``shunter_jobs{status}``, counted from the database at scrape time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_status = self.db.read(counts.jobs_by_status)
        fam = GaugeMetricFamily("shunter_jobs", "Jobs by status", labels=["status"])
        for status, n in by_status.items():
            fam.add_metric([status], n)
        yield fam


# Event types the training loop's divergence guard causes (service.jobs.attempts), and the
# service's hang watch (service.health.hang) and straggler watch (service.health.straggler).
_HEALTH_EVENT_TYPES = (
    EventType.STEP_SKIPPED,
    EventType.ROLLED_BACK,
    EventType.HUNG,
    EventType.STRAGGLER,
    EventType.THROUGHPUT_DROPPED,
)


class _TrainingHealth(Collector):
    """``shunter_training_health_events_total{type}``: optimizer steps the divergence guard
    skipped and rollbacks it made, over the jobs the database holds (counted at scrape time
    from ``events``, so every API process reports the same figure; deleting jobs lowers it,
    which Prometheus reads as a counter reset)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[CounterMetricFamily]:
        by_type = self.db.read(lambda s: counts.event_counts(s, _HEALTH_EVENT_TYPES))
        fam = CounterMetricFamily(
            "shunter_training_health_events",
            "Steps skipped and rollbacks made by the divergence guard; hangs, stragglers and "
            "throughput drops caught",
            labels=["type"],
        )
        for kind, n in by_type.items():
            fam.add_metric([kind], n)
        yield fam


# Start-up phases last from tens of milliseconds (a claim) to hours (a queue wait).
_PHASE_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 300, 1800, 3600)


class AppMetrics:
    def __init__(
        self, registry: CollectorRegistry, requests: Counter, latency: Histogram, phases: Histogram
    ) -> None:
        self.registry = registry
        self.requests = requests
        self.latency = latency
        self.phases = phases

    def observe_phase(self, mark: PhaseMark) -> None:
        """``shunter_job_phase_seconds{phase}``: a start-up phase this process recorded."""
        self.phases.labels(phase=mark.phase).observe(mark.seconds)


def build_metrics(db: Database, scheduler: Callable[[], Any] | None = None) -> AppMetrics:
    """``scheduler``: returns this process's running scheduler, or None."""
    registry = CollectorRegistry()
    requests = Counter(
        "shunter_http_requests", "HTTP requests", ["method", "route", "status"], registry=registry
    )
    latency = Histogram(
        "shunter_http_request_seconds",
        "HTTP request latency",
        ["method", "route"],
        registry=registry,
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
    )
    phases = Histogram(
        "shunter_job_phase_seconds",
        "Start-up phases of job attempts (service.jobs.phases), each from the previous one: "
        "claimed (from queued), launched, workers_up, model_built, first_step, succeeded",
        ["phase"],
        registry=registry,
        buckets=_PHASE_BUCKETS,
    )
    registry.register(_JobsByStatus(db))
    registry.register(_TrainingHealth(db))
    registry.register(SchedulingCollector(db, scheduler))
    return AppMetrics(registry, requests, latency, phases)
