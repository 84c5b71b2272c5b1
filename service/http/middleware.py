"""Pure ASGI middlewares: request body limit (413), Prometheus request metrics, security
headers on every response, and a per-token rate limit on mutating calls (429)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Histogram

from service.http.asgi_reply import send_json

__all__ = [
    "BodyLimitMiddleware",
    "RateLimitMiddleware",
    "RequestMetricsMiddleware",
    "SecurityHeadersMiddleware",
]

Scope = dict[str, Any]
Message = dict[str, Any]


def _too_large(limit: int) -> bytes:
    return json.dumps(
        {
            "detail": "payload_too_large",
            "message": f"body: larger than the {limit}-byte limit (SHUNTER_MAX_BODY_BYTES)",
        }
    ).encode()


# Lingering close: before answering 413 the rest of the body is read and dropped, up to this
# much and this long. Closing a socket with unread input makes the kernel send RST, and a
# client still writing its body then reads "connection reset" instead of our 413 (one client
# in five did). A body larger than this still gets the 413 and a close, maybe a reset.
DRAIN_BYTES = 64 * 2**20
DRAIN_SECONDS = 10.0


async def _drain(receive: Any, *, max_bytes: int, seconds: float) -> int:
    """Read and drop request body messages until the body ends or a bound is hit."""
    deadline = time.monotonic() + seconds
    drained = 0
    while drained < max_bytes:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            message: Message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            break
        if message["type"] != "http.request":
            break
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return drained


class BodyLimitMiddleware:
    """413 for bodies over ``max_bytes``: at once on ``Content-Length``, and while streaming a
    chunked body (whatever response the app then tries to send is replaced by the 413). The
    413 comes after a bounded drain of the unread body and says ``Connection: close``."""

    def __init__(self, app: Any, *, max_bytes: int, per_path: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.per_path = per_path or {}  # exact path -> its own limit (uploads)
        self.drain_bytes, self.drain_seconds = DRAIN_BYTES, DRAIN_SECONDS

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.per_path.get(scope.get("path", ""), self.max_bytes)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit() or int(value) > limit):
                await self._reject(receive, send, limit)
                return
        seen = 0
        over = False
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, over
            message: Message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    over = True
                    # Pretend the client went away: the app stops reading and fails.
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over:
                return  # the app's own reply to a truncated body is replaced by the 413
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not over:
                raise
        if over and not started:
            await self._reject(receive, send, limit)

    async def _reject(self, receive: Any, send: Any, limit: int) -> None:
        await _drain(receive, max_bytes=self.drain_bytes, seconds=self.drain_seconds)
        await send_json(send, 413, _too_large(limit), headers=[(b"connection", b"close")])


class RequestMetricsMiddleware:
    """Count and time requests by method, route template and status."""

    def __init__(self, app: Any, *, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.requests = requests
        self.latency = latency
        # Label children bound once per (method, route, status): ``labels()`` is not free.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            key = (scope["method"], path, status)
            children = self._children.get(key)
            if children is None:
                children = (
                    self.requests.labels(key[0], path, str(status)),
                    self.latency.labels(key[0], path),
                )
                self._children[key] = children
            children[0].inc()
            children[1].observe(time.perf_counter() - start)


# Everything the dashboard and /docs load is served from this origin (static/vendor/); no
# inline scripts anywhere. Inline styles stay allowed: Swagger UI and uPlot set them.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)


class SecurityHeadersMiddleware:
    """CSP, nosniff, X-Frame-Options and Referrer-Policy on every HTTP response (errors, the
    fast path and static files included): it wraps the whole app."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``take`` returns 0 (allowed) or the seconds
    until one token is back. Time is injected for tests."""

    def __init__(self, *, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = float(burst), now

    def take(self, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class RateLimitMiddleware:
    """Per-token limit on mutating calls (POST/PUT/PATCH/DELETE): ``per_minute`` sustained,
    ``burst`` at once; over it → 429 with ``Retry-After`` (whole seconds). Keyed by the SHA-256
    of the bearer token (the client address without one). ``/v1/internal/`` (drivers'
    heartbeats and metrics, fenced per attempt) is exempt. Per process: with
    ``serve --workers N`` each worker keeps its own buckets. At most ``max_keys`` buckets
    (least recently used dropped)."""

    def __init__(
        self,
        app: Any,
        *,
        per_minute: float,
        burst: int,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.rate = per_minute / 60.0
        self.burst = burst
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or self.rate <= 0
            or scope.get("method") not in _MUTATING
            or scope.get("path", "").startswith("/v1/internal/")
        ):
            await self.app(scope, receive, send)
            return
        wait = self._take(self._key(scope))
        if wait > 0:
            await _send_429(send, math.ceil(wait))
            return
        await self.app(scope, receive, send)

    def _key(self, scope: Scope) -> str:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                return hashlib.sha256(value).hexdigest()
        client = scope.get("client") or ("?", 0)
        return f"addr:{client[0]}"

    def _take(self, key: str) -> float:
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(rate=self.rate, burst=self.burst, now=now)
            self._buckets[key] = bucket
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(key)
        return bucket.take(now)


async def _send_429(send: Any, retry_after: int) -> None:
    body = json.dumps(
        {
            "detail": "rate_limited",
            "message": f"too many requests: retry after {retry_after} s "
            "(SHUNTER_RATE_LIMIT_PER_MINUTE / SHUNTER_RATE_LIMIT_BURST)",
        }
    ).encode()
    await send_json(send, 429, body, headers=[(b"retry-after", str(retry_after).encode())])
