"""Webhook gauges, read from the database at scrape time (every API process reports the same):
``shunter_webhook_deliveries{status}`` (pending, delivered, failed) and
``shunter_webhook_endpoints{state}`` (enabled, disabled)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.db.engine import Database
from service.webhooks import counts

__all__ = ["WebhookCollector"]


class WebhookCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        deliveries, endpoints = self.db.read(
            lambda s: (counts.delivery_counts(s), counts.endpoint_counts(s))
        )
        fam = GaugeMetricFamily(
            "shunter_webhook_deliveries", "Webhook deliveries by status", labels=["status"]
        )
        for status, n in deliveries.items():
            fam.add_metric([status], int(n))
        yield fam
        fam = GaugeMetricFamily(
            "shunter_webhook_endpoints", "Webhook endpoints by state", labels=["state"]
        )
        for name, n in endpoints.items():
            fam.add_metric([name], int(n))
        yield fam
