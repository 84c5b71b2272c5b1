"""Fast path for ``GET /v1/jobs/{id}``, the call every client polls, as a pure ASGI layer.

Contract: it answers only the plain success case and hands every other request, unchanged,
to the full FastAPI app, so status codes, error bodies and headers stay those of the routed
API. Served here: ``GET /v1/jobs/<id>`` (no query, no body) with a valid bearer token
(resolved through the same per-process ``TokenCache`` and lookup the dependency uses, so a
revoke still takes effect within ``SHUNTER_AUTH_CACHE_SECONDS``), on SQLite, for a job the caller's
team may see and that is not ``queued`` (a queued job's position changes with other rows).

The response bytes are cached per job id together with the job's raw database row; every
request re-reads that row (one DBAPI ``SELECT`` on a connection this layer owns, on the
event loop: a WAL read never waits for writers) and serves the cached bytes only when the
row is identical, so no write, whichever column it touches, can be served stale. A miss
builds the body from that same row with the routed path's own code (the engine's column
type conversions, then ``views.job_read`` -> ``JobRead``).
"""

from __future__ import annotations

import sqlite3
import time
from types import SimpleNamespace
from typing import Any

from prometheus_client import Counter, Histogram

from service.api.deps import AppState
from service.auth import bearer_hash, lookup_principal
from service.db.models import Job
from service.errors import Unauthorized
from service.views import job_read

__all__ = ["JobGetFastPath"]

_PREFIX = "/v1/jobs/"
_ROUTE = "/v1/jobs/{job_id}"
_CACHE_MAX = 20_000
_HEADERS_BASE = [(b"content-type", b"application/json")]
_COLUMNS = [c.name for c in Job.__table__.columns]
# Raw row: column values exactly as SQLite stores them (text, numbers): cheap to compare.
_SQL = "SELECT {} FROM jobs WHERE id = ?".format(", ".join(f'"{c}"' for c in _COLUMNS))
_TEAM = _COLUMNS.index("team")
_STATUS = _COLUMNS.index("status")

Scope = dict[str, Any]


class JobGetFastPath:
    """ASGI middleware: serve cached ``GET /v1/jobs/{id}`` bodies; everything else -> ``app``."""

    def __init__(self, app: Any, *, state: AppState, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.state = state
        self.enabled = state.db.is_sqlite
        self._conn: sqlite3.Connection | None = None
        self._processors: list[Any] | None = None
        self._cache: dict[str, tuple[tuple[Any, ...], bytes]] = {}
        # Label children bound once: ``labels()`` per request is a measurable cost.
        self._count_ok = requests.labels("GET", _ROUTE, "200")
        self._latency = latency.labels("GET", _ROUTE)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # A pooled DBAPI connection (pragmas applied by the engine's connect hook) kept
            # for this layer alone; used only from the event loop thread.
            raw: Any = self.state.db.engine.raw_connection().dbapi_connection
            self._conn = raw
        assert self._conn is not None
        return self._conn

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (
            not self.enabled
            or scope["type"] != "http"
            or scope["method"] != "GET"
            or scope["query_string"]
            or not scope["path"].startswith(_PREFIX)
        ):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        body = self._serve(scope)
        if body is None:
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*_HEADERS_BASE, (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
        self._count_ok.inc()
        self._latency.observe(time.perf_counter() - start)

    def _serve(self, scope: Scope) -> bytes | None:
        """The body for a plain success, or None: let the routed app answer."""
        job_id: str = scope["path"][len(_PREFIX) :]
        if not job_id or "/" in job_id:
            return None
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name in (b"content-length", b"transfer-encoding"):
                return None  # a body: the body-limit middleware's business
        try:
            token_hash = bearer_hash(authorization)
            principal = self.state.tokens.get(token_hash)
            if principal is None:
                # Looked up here, on the loop (one WAL read), not in the threadpool: when the
                # cache entry expires, the first request refills it before the next one is
                # parsed, instead of every open connection missing at once.
                principal = lookup_principal(self.state.db, self.state.tokens, token_hash)
        except Unauthorized:
            return None  # the routed app answers the 401 itself
        row = self._connection().execute(_SQL, (job_id,)).fetchone()
        if row is None or row[_STATUS] == "queued" or not principal.sees_team(row[_TEAM]):
            return None
        cached = self._cache.get(job_id)
        if cached is not None and cached[0] == row:
            return cached[1]
        body = job_read(self._typed(row)).model_dump_json().encode()
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[job_id] = (row, body)
        return body

    def _typed(self, row: tuple[Any, ...]) -> Any:
        """The raw row with the engine's own column type conversions (JSON, datetimes)
        applied: the object ``job_read`` reads, built from exactly the row being cached."""
        if self._processors is None:
            dialect = self.state.db.engine.dialect
            self._processors = [
                c.type._cached_result_processor(dialect, None) for c in Job.__table__.columns
            ]
        values = {
            name: (proc(value) if proc is not None and value is not None else value)
            for name, proc, value in zip(_COLUMNS, self._processors, row, strict=True)
        }
        return SimpleNamespace(**values)
