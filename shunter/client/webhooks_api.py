"""The webhook endpoints of :class:`shunter.client.Client`: endpoints and their deliveries."""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Sequence
from typing import Any

from shunter.client.responses import WebhookDelivery, WebhookEndpoint
from shunter.client.transport import Transport

__all__ = ["WebhooksAPI"]


class WebhooksAPI(Transport):
    """``/v1/webhooks/...``."""

    def create_webhook(
        self,
        url: str,
        *,
        events: Sequence[str] | None = None,
        description: str = "",
        team: str | None = None,
    ) -> WebhookEndpoint:
        """Register a receiver; its ``whsec_`` secret is in ``.secret``, shown only now."""
        body: dict[str, Any] = {"url": url, "description": description}
        if events is not None:
            body["events"] = list(events)
        if team is not None:
            body["team"] = team
        return WebhookEndpoint.model_validate(
            self._json("POST", "/v1/webhooks/endpoints", json=body)
        )

    def webhooks(self, *, team: str | None = None) -> builtins.list[WebhookEndpoint]:
        params = {"team": team} if team else {}
        return list(self._pages("/v1/webhooks/endpoints", WebhookEndpoint, params))

    def patch_webhook(
        self,
        endpoint_id: str,
        *,
        events: Sequence[str] | None = None,
        description: str | None = None,
        enabled: bool | None = None,
    ) -> WebhookEndpoint:
        given: dict[str, Any] = {
            "events": None if events is None else list(events),
            "description": description,
            "enabled": enabled,
        }
        body = {k: v for k, v in given.items() if v is not None}
        path = f"/v1/webhooks/endpoints/{endpoint_id}"
        return WebhookEndpoint.model_validate(self._json("PATCH", path, json=body))

    def delete_webhook(self, endpoint_id: str) -> WebhookEndpoint:
        path = f"/v1/webhooks/endpoints/{endpoint_id}"
        return WebhookEndpoint.model_validate(self._json("DELETE", path))

    def rotate_webhook_secret(self, endpoint_id: str) -> dict[str, Any]:
        """``{id, secret, previous_secret_valid_until}``: the new secret, shown only now."""
        path = f"/v1/webhooks/endpoints/{endpoint_id}/rotate-secret"
        return dict(self._json("POST", path))

    def webhook_deliveries(
        self,
        *,
        job: str | None = None,
        endpoint: str | None = None,
        status: str | None = None,
        team: str | None = None,
        limit: int = 50,
    ) -> builtins.list[WebhookDelivery]:
        """The newest ``limit`` deliveries matching the filters."""
        params = {"job": job, "endpoint": endpoint, "status": status, "team": team}
        pages = self._pages("/v1/webhooks/deliveries", WebhookDelivery, {**params, "limit": limit})
        return list(itertools.islice(pages, limit))

    def resend_webhook(self, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again now, under the same ``webhook-id``."""
        path = f"/v1/webhooks/deliveries/{delivery_id}/resend"
        return WebhookDelivery.model_validate(self._json("POST", path))
