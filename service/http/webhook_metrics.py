"""Webhook gauges, read from the database at scrape time (every API process reports the same):
``shunter_webhook_deliveries{status}`` (pending, delivered, failed) and
``shunter_webhook_endpoints{state}`` (enabled, disabled)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select

from service.db.engine import Database
from service.db.models import DELIVERY_STATUSES, WebhookDelivery, WebhookEndpoint

__all__ = ["WebhookCollector"]


class WebhookCollector(Collector):
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = case((WebhookEndpoint.disabled_at.is_(None), "enabled"), else_="disabled")
        deliveries, endpoints = self.db.read(
            lambda s: (
                s.execute(
                    select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)
                ).all(),
                s.execute(select(state, func.count()).group_by(state)).all(),
            )
        )
        fam = GaugeMetricFamily(
            "shunter_webhook_deliveries", "Webhook deliveries by status", labels=["status"]
        )
        for status, n in (dict.fromkeys(DELIVERY_STATUSES, 0) | dict(deliveries)).items():
            fam.add_metric([status], int(n))
        yield fam
        fam = GaugeMetricFamily(
            "shunter_webhook_endpoints", "Webhook endpoints by state", labels=["state"]
        )
        for name, n in ({"enabled": 0, "disabled": 0} | dict(endpoints)).items():
            fam.add_metric([name], int(n))
        yield fam
