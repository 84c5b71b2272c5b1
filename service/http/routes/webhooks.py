"""``/v1/webhooks``: a team's endpoints and their deliveries. Thin: parse, call, return."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from service.http.deps import CurrentUser, Limit, StateDep
from service.schemas import webhooks as api
from service.schemas.base import ErrorBody
from service.webhooks import deliveries, endpoints
from service.webhooks.ssrf import parse_allow

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/webhooks",
    tags=["webhooks"],
    responses={c: {"model": ErrorBody} for c in (400, 401, 403, 404, 409, 422)},
)


@router.post("/endpoints", status_code=201, response_model=api.WebhookEndpointCreated)
def create_endpoint(
    body: api.WebhookEndpointCreate, st: StateDep, user: CurrentUser
) -> api.WebhookEndpointCreated:
    """Register a receiver; the answer holds its ``whsec_`` secret, shown only this once.
    A URL that is not http(s) or resolves to a private address is refused (422 ``url``)."""
    allow = parse_allow(st.settings.webhook_allow)
    return endpoints.create_endpoint(st.db, principal=user, body=body, allow=allow)


@router.get("/endpoints", response_model=api.WebhookEndpointsPage)
def list_endpoints(
    st: StateDep, user: CurrentUser, team: str | None = None
) -> api.WebhookEndpointsPage:
    return st.db.read(lambda s: endpoints.list_endpoints(s, principal=user, team=team))


@router.get("/endpoints/{endpoint_id}", response_model=api.WebhookEndpointRead)
def get_endpoint(endpoint_id: str, st: StateDep, user: CurrentUser) -> api.WebhookEndpointRead:
    return st.db.read(lambda s: endpoints.get_endpoint(s, principal=user, endpoint_id=endpoint_id))


@router.patch("/endpoints/{endpoint_id}", response_model=api.WebhookEndpointRead)
def patch_endpoint(
    endpoint_id: str, body: api.WebhookEndpointPatch, st: StateDep, user: CurrentUser
) -> api.WebhookEndpointRead:
    return endpoints.patch_endpoint(st.db, principal=user, endpoint_id=endpoint_id, body=body)


@router.delete("/endpoints/{endpoint_id}", response_model=api.WebhookEndpointRead)
def delete_endpoint(endpoint_id: str, st: StateDep, user: CurrentUser) -> api.WebhookEndpointRead:
    return endpoints.delete_endpoint(st.db, principal=user, endpoint_id=endpoint_id)


@router.post("/endpoints/{endpoint_id}/rotate-secret", response_model=api.WebhookSecretRotated)
def rotate_secret(endpoint_id: str, st: StateDep, user: CurrentUser) -> api.WebhookSecretRotated:
    """A new secret (shown once); the old one signs too for SHUNTER_WEBHOOK_ROTATION_GRACE_S."""
    grace = st.settings.webhook_rotation_grace_s
    return endpoints.rotate_secret(st.db, principal=user, endpoint_id=endpoint_id, grace_s=grace)


@router.get("/deliveries", response_model=api.WebhookDeliveriesPage)
def list_deliveries(
    st: StateDep,
    user: CurrentUser,
    limit: Limit,
    team: str | None = None,
    job: str | None = None,
    endpoint: str | None = None,
    status: Literal["pending", "delivered", "failed"] | None = None,
    cursor: str | None = None,
) -> api.WebhookDeliveriesPage:
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


@router.get("/deliveries/{msg_id}", response_model=api.WebhookDeliveryRead)
def get_delivery(msg_id: str, st: StateDep, user: CurrentUser) -> api.WebhookDeliveryRead:
    return st.db.read(lambda s: deliveries.get_delivery(s, principal=user, msg_id=msg_id))


@router.post("/deliveries/{msg_id}/resend", response_model=api.WebhookDeliveryRead)
def resend(msg_id: str, st: StateDep, user: CurrentUser) -> api.WebhookDeliveryRead:
    """Send it again now, under the same ``webhook-id``, with a fresh retry schedule."""
    return deliveries.resend(st.db, principal=user, msg_id=msg_id)
