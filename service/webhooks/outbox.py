"""The outbox: webhook deliveries written in the transaction that records the job's event.

Every ``events`` row whose type maps to a webhook type (``events.webhook_type``) is turned
into one ``webhook_deliveries`` row per matching endpoint by a mapper hook on ``Event``
(``after_insert``), on the same connection and so in the same transaction: the event and
its deliveries commit together or not at all, whichever writer added the event (a state
move, a health event, a detector). A checkpoint has no event row; ``enqueue`` is called
for it directly. ``(endpoint_id, event_key)`` is unique, so the same event is never queued
twice for one endpoint (a retried batch, a second writer).

An endpoint matches when it is enabled and the type is in its ``events`` (the team's
defaults), or the job's ``notify:`` names its URL with that type.

After a commit that queued deliveries, this process's senders are woken (``waker``), so a
delivery leaves at once instead of at the next poll; other processes find it by polling.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, event, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapper, Session, object_session

from service.db.sqltime import utcnow
from service.db.tables import Event, Job, WebhookDelivery, WebhookEndpoint, utcnow_py
from service.webhooks.events import WebhookEvent, payload, webhook_type

__all__ = ["enqueue", "enqueue_in", "new_msg_id", "notify_types", "waker"]

_QUEUED = "shunter.webhooks_queued"  # Session.info flag: this transaction queued deliveries
_wakers: weakref.WeakSet[threading.Event] = weakref.WeakSet()


def waker() -> threading.Event:
    """An event set after every commit in this process that queued deliveries."""
    wake = threading.Event()
    _wakers.add(wake)
    return wake


def new_msg_id() -> str:
    return "msg_" + secrets.token_hex(16)


def notify_types(spec: Mapping[str, Any] | None) -> dict[str, set[str]]:
    """A job spec's ``notify:`` as {url: the types it asks for} (no entry: all types)."""
    wanted: dict[str, set[str]] = {}
    for entry in (spec or {}).get("notify") or []:
        url = str(entry.get("url", ""))
        wanted.setdefault(url, set()).update(entry.get("events") or ["*"])
    return wanted


def enqueue(conn: Connection, *, job_id: str, webhook: WebhookEvent) -> int:
    """Queue ``webhook`` for every endpoint that wants its type; return how many rows were new."""
    type_ = webhook.type_
    job = (
        conn.execute(
            select(
                Job.id,
                Job.team,
                Job.name,
                Job.status,
                Job.error_type,
                Job.error_message,
                Job.progress_step,
                Job.spec,
            ).where(Job.id == job_id)
        )
        .mappings()
        .first()
    )
    if job is None:
        return 0
    wanted = notify_types(job["spec"])
    endpoints = conn.execute(
        select(WebhookEndpoint.id, WebhookEndpoint.url, WebhookEndpoint.events).where(
            WebhookEndpoint.team == job["team"], WebhookEndpoint.disabled_at.is_(None)
        )
    ).all()
    targets = [
        ep_id
        for ep_id, url, types in endpoints
        if type_ in (types or []) or wanted.get(url, set()) & {type_, "*"}
    ]
    if not targets:
        return 0
    body = payload(job=dict(job), webhook=webhook)
    insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    added = 0
    for endpoint_id in targets:
        stmt = (
            insert(WebhookDelivery)
            .values(
                msg_id=new_msg_id(),
                endpoint_id=endpoint_id,
                team=job["team"],
                job_id=job_id,
                event_key=webhook.event_key,
                type=type_,
                body=body,
                status="pending",
                attempts=0,
                next_attempt_at=utcnow(),
                created_at=utcnow_py(),
            )
            .on_conflict_do_nothing(index_elements=["endpoint_id", "event_key"])
            .returning(WebhookDelivery.id)
        )
        added += conn.execute(stmt).first() is not None
    return added


def enqueue_in(session: Session, **kw: Any) -> int:
    """``enqueue`` on the session's connection; wakes the senders after its commit."""
    added = enqueue(session.connection(), **kw)
    if added:
        session.info[_QUEUED] = True
    return added


@event.listens_for(Session, "after_commit")
def _wake_senders(session: Session) -> None:
    if session.info.pop(_QUEUED, False):
        for wake in list(_wakers):
            wake.set()


@event.listens_for(Session, "after_rollback")
def _forget(session: Session) -> None:
    session.info.pop(_QUEUED, None)


@event.listens_for(Event, "after_insert")
def _after_event_insert(_mapper: Mapper[Event], conn: Connection, target: Event) -> None:
    type_ = webhook_type(event_type=target.type, to_status=target.to_status)
    if type_ is None:
        return
    webhook = WebhookEvent(
        type_=type_,
        event_key=f"event-{target.id}",
        created_at=target.time or utcnow_py(),
        message=target.message or "",
    )
    added = enqueue(conn, job_id=target.job_id, webhook=webhook)
    session = object_session(target)
    if added and session is not None:
        session.info[_QUEUED] = True
