"""``/v1/webhooks``: a team's endpoints and their deliveries. Thin: parse, call, return."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from service.http.deps import CurrentUser, Limit, StateDep
from service.schemas import (
    ErrorBody,
    WebhookDeliveriesPage,
    WebhookDeliveryRead,
    WebhookEndpointCreate,
    WebhookEndpointCreated,
    WebhookEndpointPatch,
    WebhookEndpointRead,
    WebhookEndpointsPage,
    WebhookSecretRotated,
)
from service.webhooks import deliveries, endpoints
from service.webhooks.ssrf import parse_allow

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/webhooks",
    tags=["webhooks"],
    responses={c: {"model": ErrorBody} for c in (400, 401, 403, 404, 409, 422)},
)


@router.post("/endpoints", status_code=201, response_model=WebhookEndpointCreated)
def create_endpoint(
    body: WebhookEndpointCreate, st: StateDep, user: CurrentUser
) -> WebhookEndpointCreated:
    """Register a receiver; the answer holds its ``whsec_`` secret, shown only this once.
    A URL that is not http(s) or resolves to a private address is refused (422 ``url``)."""
    allow = parse_allow(st.settings.webhook_allow)
    return endpoints.create_endpoint(st.db, principal=user, body=body, allow=allow)


@router.get("/endpoints", response_model=WebhookEndpointsPage)
def list_endpoints(
    st: StateDep, user: CurrentUser, team: str | None = None
) -> WebhookEndpointsPage:
    return st.db.read(lambda s: endpoints.list_endpoints(s, principal=user, team=team))


@router.get("/endpoints/{endpoint_id}", response_model=WebhookEndpointRead)
def get_endpoint(endpoint_id: str, st: StateDep, user: CurrentUser) -> WebhookEndpointRead:
    return st.db.read(lambda s: endpoints.get_endpoint(s, principal=user, endpoint_id=endpoint_id))


@router.patch("/endpoints/{endpoint_id}", response_model=WebhookEndpointRead)
def patch_endpoint(
    endpoint_id: str, body: WebhookEndpointPatch, st: StateDep, user: CurrentUser
) -> WebhookEndpointRead:
    return endpoints.patch_endpoint(st.db, principal=user, endpoint_id=endpoint_id, body=body)


@router.delete("/endpoints/{endpoint_id}", response_model=WebhookEndpointRead)
def delete_endpoint(endpoint_id: str, st: StateDep, user: CurrentUser) -> WebhookEndpointRead:
    return endpoints.delete_endpoint(st.db, principal=user, endpoint_id=endpoint_id)


@router.post("/endpoints/{endpoint_id}/rotate-secret", response_model=WebhookSecretRotated)
def rotate_secret(endpoint_id: str, st: StateDep, user: CurrentUser) -> WebhookSecretRotated:
    """A new secret (shown once); the old one signs too for SHUNTER_WEBHOOK_ROTATION_GRACE_S."""
    grace = st.settings.webhook_rotation_grace_s
    return endpoints.rotate_secret(st.db, principal=user, endpoint_id=endpoint_id, grace_s=grace)


@router.get("/deliveries", response_model=WebhookDeliveriesPage)
def list_deliveries(
    st: StateDep,
    user: CurrentUser,
    limit: Limit,
    team: str | None = None,
    job: str | None = None,
    endpoint: str | None = None,
    status: Literal["pending", "delivered", "failed"] | None = None,
    cursor: str | None = None,
) -> WebhookDeliveriesPage:
    """Newest first, filtered by team (admins), job, endpoint or status."""
    return st.db.read(
        lambda s: deliveries.list_deliveries(
            s,
            principal=user,
            limit=limit,
            team=team,
            job_id=job,
            endpoint_id=endpoint,
            status=status,
            cursor=cursor,
        )
    )


@router.get("/deliveries/{msg_id}", response_model=WebhookDeliveryRead)
def get_delivery(msg_id: str, st: StateDep, user: CurrentUser) -> WebhookDeliveryRead:
    return st.db.read(lambda s: deliveries.get_delivery(s, principal=user, msg_id=msg_id))


@router.post("/deliveries/{msg_id}/resend", response_model=WebhookDeliveryRead)
def resend(msg_id: str, st: StateDep, user: CurrentUser) -> WebhookDeliveryRead:
    """Send it again now, under the same ``webhook-id``, with a fresh retry schedule."""
    return deliveries.resend(st.db, principal=user, msg_id=msg_id)
