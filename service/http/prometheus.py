"""Prometheus metrics, one registry per app (tests build many apps in one process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from service.db.engine import Database
from service.db.models import JOB_STATUSES, Job
from service.http.scheduling_metrics import SchedulingCollector

__all__ = ["AppMetrics", "build_metrics"]


class _JobsByStatus(Collector):
    """``shunter_jobs{status}``, counted from the database at scrape time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = dict.fromkeys(JOB_STATUSES, 0)
        rows = self.db.read(
            lambda s: s.execute(select(Job.status, func.count()).group_by(Job.status)).all()
        )
        for status, n in rows:
            counts[status] = int(n)
        fam = GaugeMetricFamily("shunter_jobs", "Jobs by status", labels=["status"])
        for status, n in counts.items():
            fam.add_metric([status], n)
        yield fam


class AppMetrics:
    def __init__(self, registry: CollectorRegistry, requests: Counter, latency: Histogram):
        self.registry = registry
        self.requests = requests
        self.latency = latency


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
    registry.register(_JobsByStatus(db))
    registry.register(SchedulingCollector(db, scheduler))
    return AppMetrics(registry, requests, latency)
