"""What the webhook metrics report (read at scrape time): deliveries by status and endpoints
by state. Read-only queries; the Prometheus shapes are ``service.http.webhook_metrics``'s.
"""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from service.db.tables import DELIVERY_STATUSES, WebhookDelivery, WebhookEndpoint

__all__ = ["delivery_counts", "endpoint_counts"]


def delivery_counts(session: Session) -> dict[str, int]:
    """Every delivery status, 0 where none."""
    rows = session.execute(
        select(WebhookDelivery.status, func.count()).group_by(WebhookDelivery.status)
    ).all()
    return dict.fromkeys(DELIVERY_STATUSES, 0) | {status: int(n) for status, n in rows}


def endpoint_counts(session: Session) -> dict[str, int]:
    """``enabled`` and ``disabled`` endpoints."""
    state = case((WebhookEndpoint.disabled_at.is_(None), "enabled"), else_="disabled")
    rows = session.execute(select(state, func.count()).group_by(state)).all()
    return {"enabled": 0, "disabled": 0} | {name: int(n) for name, n in rows}
