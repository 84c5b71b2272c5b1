"""Pure ASGI middlewares: request body limit (413) and Prometheus request metrics."""

from __future__ import annotations

import json
import time
from typing import Any

from prometheus_client import Counter, Histogram

__all__ = ["BodyLimitMiddleware", "RequestMetricsMiddleware"]

Scope = dict[str, Any]
Message = dict[str, Any]


def _too_large(limit: int) -> bytes:
    return json.dumps(
        {
            "detail": "payload_too_large",
            "message": f"body: larger than the {limit}-byte limit (SHUNTER_MAX_BODY_BYTES)",
        }
    ).encode()


class BodyLimitMiddleware:
    """413 for bodies over ``max_bytes``: at once on ``Content-Length``, and while streaming a
    chunked body (whatever response the app then tries to send is replaced by the 413)."""

    def __init__(self, app: Any, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await self._reject(send)
                return
        seen = 0
        over = False
        started = False

        async def limited_receive() -> Message:
            nonlocal seen, over
            message: Message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
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
            await self._reject(send)

    async def _reject(self, send: Any) -> None:
        body = _too_large(self.max_bytes)
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


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
