"""A team's webhook endpoints and deliveries (``/v1/webhooks``)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from service.schemas.base import Name, Utc, _In, _Out
from shunter.jobspec.vocab import WebhookEventType

__all__ = [
    "WebhookDeliveriesPage",
    "WebhookDeliveryRead",
    "WebhookEndpointCreate",
    "WebhookEndpointCreated",
    "WebhookEndpointPatch",
    "WebhookEndpointRead",
    "WebhookEndpointsPage",
    "WebhookSecretRotated",
]


class WebhookEndpointCreate(_In):
    """A team's receiver. ``events``: the types it gets for every job of the team (empty:
    only for jobs whose ``notify:`` names its URL)."""

    team: Name | None = None  # admins may name another team; default: the caller's
    url: str = Field(min_length=1, max_length=2048)
    events: list[WebhookEventType] = Field(default_factory=lambda: list(get_args(WebhookEventType)))
    description: str = Field("", max_length=255)


class WebhookEndpointPatch(_In):
    events: list[WebhookEventType] | None = None
    description: str | None = Field(None, max_length=255)
    enabled: bool | None = None  # true re-enables a disabled endpoint (failures reset)


class WebhookEndpointRead(_Out):
    id: str
    team: str
    url: str
    description: str
    events: list[str]
    enabled: bool
    disabled_at: Utc | None
    disabled_reason: str | None
    failures: int  # consecutive failed attempts
    failing_since: Utc | None
    previous_secret_valid_until: Utc | None  # during a rotation
    created_by: str | None
    created_at: Utc


class WebhookEndpointCreated(WebhookEndpointRead):
    secret: str  # whsec_...; shown once


class WebhookSecretRotated(_Out):
    id: str
    secret: str  # the new whsec_...; shown once
    previous_secret_valid_until: Utc  # the old one signs too until then


class WebhookEndpointsPage(_Out):
    data: list[WebhookEndpointRead]


class WebhookDeliveryRead(_Out):
    id: str  # the webhook-id header (msg_...): the same on every retry and re-send
    event_id: str  # the payload's id (evt_...): the same for every endpoint
    endpoint_id: str
    team: str
    job_id: str
    type: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: Utc | None  # pending only
    last_attempt_at: Utc | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: Utc | None
    created_at: Utc


class WebhookDeliveriesPage(_Out):
    data: list[WebhookDeliveryRead]
    next_cursor: str | None
