"""Operations: ``/healthz`` (liveness + database), ``/metrics`` (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from service.http.deps import StateDep

__all__ = ["router"]

router = APIRouter(tags=["ops"])


@router.get("/healthz")
def healthz(st: StateDep) -> dict[str, str]:
    st.db.read(lambda s: s.execute(text("SELECT 1")).scalar_one())
    return {"status": "ok"}


@router.get("/metrics", response_class=Response)
def metrics(st: StateDep) -> Response:
    registry = st.extras["registry"]
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
