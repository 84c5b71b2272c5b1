"""``GET /v1/jobs/{id}/logs?follow=true``: an attempt's output as Server-Sent Events, read from
the durable log store every ``Settings.sse_poll_seconds`` (the pattern of ``http.sse``).

Events: ``log`` (``id:`` = the next offset, data: ``{attempt, offset, next_offset, text,
truncated}``), ``attempt`` when the job moves on to a new attempt (only when no ``attempt`` was
asked for), ``end`` once the job is terminal and its output has stopped growing. Resume with
``Last-Event-ID`` (an offset) or ``?offset=``. Every read runs in the threadpool.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from service.accounts.auth import Principal
from service.http.deps import AppState
from service.http.sse import client_left, keepalive, sse_frame
from service.jobs import logs as job_logs
from service.jobs.states import TERMINAL, JobStatus
from service.schemas.jobs import LogsRead

__all__ = ["follow"]

_SETTLE_S = 3.0  # a finished job's driver ships its last lines within this


def _poll(
    st: AppState, user: Principal, job_id: str, attempt: int | None, offset: int
) -> tuple[LogsRead, str, int]:
    store = job_logs.store_for(st.settings)

    def read(session: Any) -> tuple[LogsRead, str, int]:
        page = job_logs.read_logs(
            session,
            store,
            principal=user,
            job_id=job_id,
            attempt=attempt,
            offset=offset,
            limit=st.settings.log_page_max_bytes,
            tail=None,
        )
        status, current = job_logs.job_state(session, job_id=job_id)
        return page, status, current

    return st.db.read(read)


async def follow(
    request: Request,
    st: AppState,
    user: Principal,
    job_id: str,
    attempt: int | None,
    offset: int,
) -> AsyncIterator[str]:
    pinned = attempt is not None
    last_sent = last_growth = time.monotonic()
    while True:
        page, status, current = await run_in_threadpool(_poll, st, user, job_id, attempt, offset)
        if not pinned and page.attempt is not None and attempt is None:
            attempt = page.attempt
        if page.text:
            offset = page.next_offset
            last_sent = last_growth = time.monotonic()
            data = {
                "attempt": page.attempt,
                "offset": page.offset,
                "next_offset": page.next_offset,
                "text": page.text,
                "truncated": page.truncated,
            }
            yield sse_frame("log", data, event_id=page.next_offset)
            if page.next_offset < page.size:
                continue  # more backlog: no sleep
        if not pinned and current and attempt is not None and current != attempt:
            attempt, offset = current, 0
            yield sse_frame("attempt", {"attempt": current})
            continue
        if JobStatus(status) in TERMINAL and time.monotonic() - last_growth > _SETTLE_S:
            yield sse_frame("end", {"status": status, "attempt": attempt, "next_offset": offset})
            return
        ping, last_sent = keepalive(last_sent)
        if ping:
            yield ping
        if await client_left(request, st):
            return
