"""Admin: nodes the straggler watch flagged, their cordons, and lifting one (thin routes over
``service.health.cordons``)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from service.db.tables import utcnow_py
from service.health.cordons import lift_cordon, list_nodes
from service.http.deps import CurrentUser, StateDep
from service.schemas.base import ErrorBody
from service.schemas.cluster import NodeCordonRead

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/admin",
    tags=["nodes"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 404)},
)


@router.get("/nodes", response_model=list[NodeCordonRead])
def nodes(st: StateDep, user: CurrentUser) -> list[NodeCordonRead]:
    """Every node a ``straggler`` event flagged: its flags and whether it is cordoned (left
    out of placement) until when (``SHUNTER_STRAGGLER_CORDON_AFTER``/``_SECONDS``)."""
    now = utcnow_py()
    return st.db.read(lambda s: list_nodes(s, principal=user, now=now))


@router.delete("/nodes/{node_id}/cordon", status_code=204)
def uncordon(node_id: str, st: StateDep, user: CurrentUser) -> Response:
    """End a node's cordon now and clear its flags."""
    st.db.write(lambda s: lift_cordon(s, principal=user, node_id=node_id))
    return Response(status_code=204)
