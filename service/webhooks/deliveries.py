"""A team's webhook deliveries: list (newest first, filtered), read one, re-send one.

A re-send puts the row back in the queue now with a fresh retry schedule and the SAME
``webhook-id``, so a receiver that already processed it can tell (Standard Webhooks).
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_writer, visible
from service.db.engine import Database
from service.db.paging import keyset_page
from service.db.rows import from_row
from service.db.sqltime import utcnow
from service.db.tables import WebhookDelivery, WebhookEndpoint
from service.errors import Conflict, NotFound
from service.schemas.webhooks import WebhookDeliveriesPage, WebhookDeliveryRead
from service.webhooks.events import event_id

__all__ = ["delivery_read", "get_delivery", "list_deliveries", "resend"]


def delivery_read(d: WebhookDelivery) -> WebhookDeliveryRead:
    return from_row(
        WebhookDeliveryRead,
        d,
        id=d.msg_id,
        event_id=event_id(d.job_id, d.event_key),
        next_attempt_at=d.next_attempt_at if d.status == "pending" else None,
    )


def list_deliveries(
    session: Session,
    *,
    principal: Principal,
    limit: int,
    team: str | None = None,
    job_id: str | None = None,
    endpoint_id: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
) -> WebhookDeliveriesPage:
    """Newest first; the caller's team's (an admin: ``team``'s, or every team's)."""
    stmt = select(WebhookDelivery).order_by(WebhookDelivery.id.desc())
    if team is not None or not principal.is_admin:
        wanted = team or principal.team
        if not principal.sees_team(wanted):
            raise NotFound(f"team {wanted!r} not found")
        stmt = stmt.where(WebhookDelivery.team == wanted)
    if job_id is not None:
        stmt = stmt.where(WebhookDelivery.job_id == job_id)
    if endpoint_id is not None:
        stmt = stmt.where(WebhookDelivery.endpoint_id == endpoint_id)
    if status is not None:
        stmt = stmt.where(WebhookDelivery.status == status)
    rows, nxt = keyset_page(
        session, stmt, WebhookDelivery.id, cursor=cursor, limit=limit, newest_first=True
    )
    return WebhookDeliveriesPage(data=[delivery_read(d) for d in rows], next_cursor=nxt)


def _owned(session: Session, principal: Principal, msg_id: str) -> WebhookDelivery:
    d = session.execute(
        select(WebhookDelivery).where(WebhookDelivery.msg_id == msg_id)
    ).scalar_one_or_none()
    return visible(principal, d, f"webhook delivery {msg_id}")


def get_delivery(session: Session, *, principal: Principal, msg_id: str) -> WebhookDeliveryRead:
    return delivery_read(_owned(session, principal, msg_id))


def resend(db: Database, *, principal: Principal, msg_id: str) -> WebhookDeliveryRead:
    """Queue ``msg_id`` again now (409 while its endpoint is disabled: enable it first)."""
    require_writer(principal)

    def _resend(session: Session) -> WebhookDeliveryRead:
        d = _owned(session, principal, msg_id)
        disabled = session.execute(
            select(WebhookEndpoint.disabled_at).where(WebhookEndpoint.id == d.endpoint_id)
        ).scalar_one()
        if disabled is not None:
            raise Conflict(
                f"endpoint {d.endpoint_id} is disabled; enable it first "
                f"(PATCH /v1/webhooks/endpoints/{d.endpoint_id} with enabled: true)"
            )
        session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == d.id)
            .values(
                status="pending",
                attempts=0,
                next_attempt_at=utcnow(),
                claimed_until=None,
                claim_token=None,
            )
            .execution_options(synchronize_session=False)
        )
        session.refresh(d)
        return delivery_read(d)

    return db.write(_resend)
