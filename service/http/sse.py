"""``GET /v1/jobs/{id}/metrics/stream``: Server-Sent Events of new metric points and status
changes, polling the database every ``Settings.sse_poll_seconds``.

Events: ``status`` (data: ``{status, attempt, progress}``, first at connect and on every
change), ``metric`` (``id:`` = point id, data: the point), ``end`` once the job is terminal
and every point is sent. Resume with ``Last-Event-ID`` or ``?after=<point id>``.

Bounds: at most ``SHUNTER_SSE_MAX_STREAMS_PER_TOKEN`` concurrent streams per token and API
process (more → 429 with ``Retry-After``); the token is looked up again in the database every
``SHUNTER_SSE_TOKEN_RECHECK_SECONDS`` (30 s), so a revoked token's stream ends with an
``error`` event within a minute.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, bearer_hash, lookup_principal
from service.db.tables import MetricPoint
from service.errors import Unauthorized
from service.http.deps import AppState, CurrentUser, StateDep
from service.jobs.queries import visible_job
from service.jobs.states import TERMINAL, JobStatus
from service.schemas.jobs import MetricRead

__all__ = ["client_left", "keepalive", "router", "sse_frame"]

router = APIRouter(prefix="/v1", tags=["jobs"])
_BATCH = 500
_KEEPALIVE_S = 15.0
_LOCK = threading.Lock()  # guards the per-token stream counts in AppState.extras


def sse_frame(event: str, data: Any, event_id: int | None = None) -> str:
    """One server-sent event frame (this module's streams and ``log_stream``'s)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def keepalive(last_sent: float) -> tuple[str | None, float]:
    """A comment frame when the stream has been quiet past ``_KEEPALIVE_S`` (proxies close
    idle streams), and the time the stream last sent something."""
    if time.monotonic() - last_sent > _KEEPALIVE_S:
        return ": keepalive\n\n", time.monotonic()
    return None, last_sent


async def client_left(request: Request, st: AppState) -> bool:
    """True when the client is gone; else wait one poll interval first."""
    if await request.is_disconnected():
        return True
    await anyio.sleep(st.settings.sse_poll_seconds)
    return False


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


def _open_streams(st: AppState) -> dict[str, int]:
    counts: dict[str, int] = st.extras.setdefault("sse_streams", {})
    return counts


def _take_slot(st: AppState, token_hash: str) -> bool:
    with _LOCK:
        counts = _open_streams(st)
        if counts.get(token_hash, 0) >= st.settings.sse_max_streams_per_token:
            return False
        counts[token_hash] = counts.get(token_hash, 0) + 1
        return True


def _free_slot(st: AppState, token_hash: str) -> None:
    with _LOCK:
        counts = _open_streams(st)
        counts[token_hash] = counts.get(token_hash, 1) - 1
        if counts[token_hash] <= 0:
            del counts[token_hash]


async def _events(
    request: Request, st: AppState, user: Principal, job_id: str, after: int, token_hash: str
) -> AsyncIterator[str]:
    # The slot is taken here, not in the route: a generator that never starts (the client
    # left first) then never holds one.
    if not _take_slot(st, token_hash):
        yield sse_frame("error", {"message": "too many concurrent streams for this token"})
        return
    try:
        async for chunk in _stream(request, st, user, job_id, after, token_hash):
            yield chunk
    finally:
        _free_slot(st, token_hash)


async def _stream(
    request: Request, st: AppState, user: Principal, job_id: str, after: int, token_hash: str
) -> AsyncIterator[str]:
    last_status: dict[str, Any] | None = None
    last_sent = time.monotonic()
    checked = time.monotonic()
    while True:
        if time.monotonic() - checked > st.settings.sse_token_recheck_seconds:
            checked = time.monotonic()
            try:  # the database, not the cache: a revoke elsewhere counts
                await run_in_threadpool(lookup_principal, st.db, st.tokens, token_hash)
            except Unauthorized:
                yield sse_frame("error", {"message": "token revoked"})
                return
        status, points = await run_in_threadpool(_read, st, user, job_id, after)
        if status != last_status:
            last_status = status
            yield sse_frame("status", status)
        for p in points:
            after = p.id
            yield sse_frame("metric", p.model_dump(mode="json"), event_id=p.id)
        if points:
            last_sent = time.monotonic()
        if JobStatus(status["status"]) in TERMINAL and len(points) < _BATCH:
            yield sse_frame("end", {"status": status["status"]})
            return
        if len(points) == _BATCH:
            continue  # more backlog: no sleep
        ping, last_sent = keepalive(last_sent)
        if ping:
            yield ping
        if await client_left(request, st):
            return


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
) -> Response:
    """SSE stream; 404 at once (not mid-stream) for an unknown or another team's job; 429
    when this token already holds ``SHUNTER_SSE_MAX_STREAMS_PER_TOKEN`` streams."""
    st.db.read(lambda s: visible_job(s, principal=user, job_id=job_id))
    token_hash = bearer_hash(request.headers.get("authorization"))
    with _LOCK:
        full = _open_streams(st).get(token_hash, 0) >= st.settings.sse_max_streams_per_token
    if full:
        return JSONResponse(
            {
                "detail": "too_many_streams",
                "message": f"this token already has {st.settings.sse_max_streams_per_token} "
                "open streams (SHUNTER_SSE_MAX_STREAMS_PER_TOKEN); close one",
            },
            status_code=429,
            headers={"Retry-After": "5"},
        )
    start = after or 0
    if last_event_id is not None and last_event_id.strip().isdigit():
        start = max(start, int(last_event_id.strip()))
    return StreamingResponse(
        _events(request, st, user, job_id, start, token_hash),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
