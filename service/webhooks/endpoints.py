"""A team's webhook endpoints: create (the secret shown once), list, change, rotate the
secret, delete; and the second-pass check of a job's ``notify:``.

Members and admins of a team manage its endpoints; viewers read them; an admin may manage
any team's. Another team's endpoint is "not found". URLs pass the SSRF guard at creation.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_writer, visible
from service.db.engine import Database
from service.db.rows import from_row
from service.db.tables import Team, WebhookEndpoint, utcnow_py
from service.errors import Conflict, Forbidden, NotFound
from service.schemas.webhooks import (
    WebhookEndpointCreate,
    WebhookEndpointCreated,
    WebhookEndpointPatch,
    WebhookEndpointRead,
    WebhookEndpointsPage,
    WebhookSecretRotated,
)
from service.webhooks.signing import new_secret
from service.webhooks.ssrf import Network, Resolver, refuse_unsafe
from shunter.jobspec.errors import FieldError

__all__ = [
    "create_endpoint",
    "delete_endpoint",
    "endpoint_read",
    "get_endpoint",
    "list_endpoints",
    "notify_errors",
    "patch_endpoint",
    "rotate_secret",
]


def endpoint_read(ep: WebhookEndpoint) -> WebhookEndpointRead:
    return from_row(
        WebhookEndpointRead,
        ep,
        events=list(ep.events or []),
        enabled=ep.disabled_at is None,
        previous_secret_valid_until=ep.previous_secret_until if ep.previous_secret else None,
    )


def _team_of(principal: Principal, team: str | None) -> str:
    if team is None or team == principal.team:
        return principal.team
    if not principal.is_admin:
        raise Forbidden(f"team: you may manage only team {principal.team!r}'s webhooks")
    return team


def _owned(session: Session, principal: Principal, endpoint_id: str) -> WebhookEndpoint:
    ep = session.get(WebhookEndpoint, endpoint_id)
    return visible(principal, ep, f"webhook endpoint {endpoint_id}")


def create_endpoint(
    db: Database,
    *,
    principal: Principal,
    body: WebhookEndpointCreate,
    allow: Sequence[Network],
    resolve: Resolver | None = None,
) -> WebhookEndpointCreated:
    """Register ``body.url`` for the team (422 naming ``url`` if it may not be called)."""
    require_writer(principal)
    team = _team_of(principal, body.team)
    kw: dict[str, Any] = {} if resolve is None else {"resolve": resolve}
    refuse_unsafe(body.url, field="url", allow=allow, **kw)

    def _create(session: Session) -> WebhookEndpointCreated:
        if session.get(Team, team) is None:
            raise NotFound(f"team {team!r} not found")
        taken = session.execute(
            select(WebhookEndpoint.id).where(
                WebhookEndpoint.team == team, WebhookEndpoint.url == body.url
            )
        ).scalar_one_or_none()
        if taken is not None:
            raise Conflict(f"url: team {team!r} already has this endpoint ({taken})")
        ep = WebhookEndpoint(
            id="whe_" + secrets.token_hex(12),
            team=team,
            url=body.url,
            description=body.description,
            events=list(dict.fromkeys(body.events)),
            secret=new_secret(),
            created_by=principal.name,
            created_at=utcnow_py(),
        )
        session.add(ep)
        session.flush()
        return WebhookEndpointCreated(**endpoint_read(ep).model_dump(), secret=ep.secret)

    return db.write(_create)


def list_endpoints(
    session: Session, *, principal: Principal, team: str | None = None
) -> WebhookEndpointsPage:
    """The caller's team's endpoints (an admin: ``team``'s, or every team's when None)."""
    stmt = select(WebhookEndpoint).order_by(WebhookEndpoint.team, WebhookEndpoint.created_at)
    if team is not None or not principal.is_admin:
        wanted = team or principal.team
        if not principal.sees_team(wanted):
            raise NotFound(f"team {wanted!r} not found")
        stmt = stmt.where(WebhookEndpoint.team == wanted)
    rows = session.execute(stmt).scalars().all()
    return WebhookEndpointsPage(data=[endpoint_read(ep) for ep in rows])


def get_endpoint(
    session: Session, *, principal: Principal, endpoint_id: str
) -> WebhookEndpointRead:
    return endpoint_read(_owned(session, principal, endpoint_id))


def patch_endpoint(
    db: Database, *, principal: Principal, endpoint_id: str, body: WebhookEndpointPatch
) -> WebhookEndpointRead:
    """Change events/description; ``enabled: true`` re-enables (and forgets the failures),
    ``false`` disables by hand."""
    require_writer(principal)

    def _patch(session: Session) -> WebhookEndpointRead:
        ep = _owned(session, principal, endpoint_id)
        if body.events is not None:
            ep.events = list(dict.fromkeys(body.events))
        if body.description is not None:
            ep.description = body.description
        if body.enabled is True:
            ep.disabled_at, ep.disabled_reason = None, None
            ep.failures, ep.failing_since = 0, None
        elif body.enabled is False and ep.disabled_at is None:
            ep.disabled_at, ep.disabled_reason = utcnow_py(), f"disabled by {principal.name}"
        session.flush()
        return endpoint_read(ep)

    return db.write(_patch)


def rotate_secret(
    db: Database, *, principal: Principal, endpoint_id: str, grace_s: float
) -> WebhookSecretRotated:
    """A new secret; the current one keeps signing beside it for ``grace_s`` seconds."""
    require_writer(principal)

    def _rotate(session: Session) -> WebhookSecretRotated:
        ep = _owned(session, principal, endpoint_id)
        until = utcnow_py() + timedelta(seconds=grace_s)
        ep.previous_secret, ep.previous_secret_until = ep.secret, until
        ep.secret = new_secret()
        session.flush()
        return WebhookSecretRotated(id=ep.id, secret=ep.secret, previous_secret_valid_until=until)

    return db.write(_rotate)


def delete_endpoint(db: Database, *, principal: Principal, endpoint_id: str) -> WebhookEndpointRead:
    """Delete it and its deliveries (pending ones are never sent)."""
    require_writer(principal)

    def _delete(session: Session) -> WebhookEndpointRead:
        ep = _owned(session, principal, endpoint_id)
        read = endpoint_read(ep)
        session.delete(ep)
        return read

    return db.write(_delete)


def notify_errors(session: Session, *, team: str, spec: dict[str, Any]) -> list[FieldError]:
    """A job's ``notify:`` URLs must be endpoints of its team (registered, so checked)."""
    entries = spec.get("notify") or []
    if not entries:
        return []
    known = set(
        session.execute(select(WebhookEndpoint.url).where(WebhookEndpoint.team == team)).scalars()
    )
    return [
        FieldError(
            f"notify.{i}.url",
            f"{entry['url']!r} is not a webhook endpoint of team {team!r}; register it first "
            "(shunter webhooks create URL, or POST /v1/webhooks/endpoints), which checks it",
        )
        for i, entry in enumerate(entries)
        if entry.get("url") not in known
    ]
