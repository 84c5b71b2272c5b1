"""``GET /v1/jobs/{id}`` for pollers, without the framework's per-request machinery.

Clients poll this one call far more than any other (``shunter watch``, dashboards, CI
scripts), so its cost per request bounds how many pollers a 2-core API serves. The route in
``routes/jobs.py`` stays the definition (OpenAPI, errors); this ASGI layer answers only the
success path of a plain poll, with the same code underneath:

- the token from the token cache (``service.accounts.auth``: the same hash and cache the
  ``CurrentUser`` dependency uses);
- the job from ``service.jobs.queries.get_job`` (one indexed Core read, stored position,
  reason and ETAs), run on its own thread pool (``SHUNTER_POLL_THREADS``, default 1: the
  read takes well under a millisecond, and more threads mostly add GIL hand-offs, which show
  as tail latency), never on the event loop;
- the body serialised once, as the route does.

Anything else (a query string, a token not yet cached, a job that is not found or not
visible, a malformed id, the database away) falls through to the FastAPI route unchanged,
so every error keeps one shape and one place. The middlewares outside this one (security
headers, rate limit, body limit, request metrics) see these requests as they see any other.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.types import Receive, Scope, Send

from service.accounts.auth import bearer_hash
from service.errors import ServiceError
from service.http.asgi_reply import send_json
from service.jobs import queries as jobs

__all__ = ["JobPollMiddleware"]

_PATH = re.compile(r"/v1/jobs/([A-Za-z0-9_-]{1,100})")
_TEMPLATE = "/v1/jobs/{job_id}"


class _RouteLabel:
    """What ``RequestMetricsMiddleware`` reads from ``scope["route"]``."""

    path = _TEMPLATE


class JobPollMiddleware:
    def __init__(self, app: Any, *, threads: int = 1) -> None:
        self.app = app
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            match = _PATH.fullmatch(scope["path"])
            if match is not None and await self._answer(scope, send, match.group(1)):
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, send: Send, job_id: str) -> bool:
        state = scope["app"].state.shunter
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        try:
            principal = state.tokens.get(bearer_hash(authorization))
        except ServiceError:
            return False
        if principal is None:
            return False  # the route looks the token up (and caches it)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="shunter-poll")
        loop = asyncio.get_running_loop()
        try:
            job = await loop.run_in_executor(
                self._pool,
                lambda: state.db.read_core(
                    lambda c: jobs.get_job(c, principal=principal, job_id=job_id)
                ),
            )
        except (ServiceError, DBAPIError, PoolTimeout):
            # Not found / not visible, or the database away: the route gives the error (a
            # 404, or the 503 + Retry-After of ``error_mapping``; never a 500 from out here).
            return False
        body = job.model_dump_json().encode()
        scope["route"] = _RouteLabel
        await send_json(send, 200, body)
        return True
