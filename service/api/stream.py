"""``GET /v1/jobs/{id}/metrics/stream``: Server-Sent Events of new metric points and status
changes, polling the database every ``Settings.sse_poll_seconds``.

Events: ``status`` (data: ``{status, attempt, progress}``, first at connect and on every
change), ``metric`` (``id:`` = point id, data: the point), ``end`` once the job is terminal
and every point is sent. Resume with ``Last-Event-ID`` or ``?after=<point id>``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import AppState, CurrentUser, StateDep
from service.auth import Principal
from service.db.models import MetricPoint
from service.jobs import visible_job
from service.schemas import MetricRead
from service.states import TERMINAL, JobStatus

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"])
_BATCH = 500
_KEEPALIVE_S = 15.0


def _sse(event: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _poll(
    session: Session, *, user: Principal, job_id: str, after: int
) -> tuple[dict[str, Any], list[MetricRead]]:
    job = visible_job(session, principal=user, job_id=job_id)
    status = {
        "status": job.status,
        "attempt": job.attempt,
        "progress": {
            "step": job.progress_step,
            "total_steps": job.progress_total_steps,
            "epoch": job.progress_epoch,
        },
    }
    rows = session.execute(
        select(MetricPoint)
        .where(MetricPoint.job_id == job_id, MetricPoint.id > after)
        .order_by(MetricPoint.id)
        .limit(_BATCH)
    ).scalars()
    return status, [MetricRead.model_validate(m) for m in rows]


def _read(
    st: AppState, user: Principal, job_id: str, after: int
) -> tuple[dict[str, Any], list[MetricRead]]:
    return st.db.read(lambda s: _poll(s, user=user, job_id=job_id, after=after))


async def _events(
    request: Request, st: AppState, user: Principal, job_id: str, after: int
) -> AsyncIterator[str]:
    last_status: dict[str, Any] | None = None
    last_sent = time.monotonic()
    while True:
        status, points = await run_in_threadpool(_read, st, user, job_id, after)
        if status != last_status:
            last_status = status
            yield _sse("status", status)
        for p in points:
            after = p.id
            yield _sse("metric", p.model_dump(mode="json"), event_id=p.id)
        if points:
            last_sent = time.monotonic()
        if JobStatus(status["status"]) in TERMINAL and len(points) < _BATCH:
            yield _sse("end", {"status": status["status"]})
            return
        if len(points) == _BATCH:
            continue  # more backlog: no sleep
        if time.monotonic() - last_sent > _KEEPALIVE_S:
            last_sent = time.monotonic()
            yield ": keepalive\n\n"
        if await request.is_disconnected():
            return
        await anyio.sleep(st.settings.sse_poll_seconds)


@router.get(
    "/jobs/{job_id}/metrics/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
def stream_metrics(
    job_id: str,
    request: Request,
    st: StateDep,
    user: CurrentUser,
    after: Annotated[int | None, Query(ge=0)] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """SSE stream; 404 at once (not mid-stream) for an unknown or another team's job."""
    st.db.read(lambda s: visible_job(s, principal=user, job_id=job_id))
    start = after or 0
    if last_event_id is not None and last_event_id.strip().isdigit():
        start = max(start, int(last_event_id.strip()))
    return StreamingResponse(
        _events(request, st, user, job_id, start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
