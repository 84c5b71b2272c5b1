"""One whole JSON reply written on a raw ASGI ``send``, for the middlewares that answer before
the app does (the body limit's 413, the rate limit's 429, the job poll's 200)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["send_json"]


async def send_json(
    send: Any, status: int, body: bytes, *, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """The response start (JSON content type and the body's length, then ``headers``) and the
    body, in one message each."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
