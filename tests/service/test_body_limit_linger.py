"""The 413 for an oversized body reaches the client: the middleware drains the body (bounded)
before answering and closing, so a client still writing never reads a connection reset.
A real uvicorn server and raw sockets, as a client that sends its whole body before reading."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from service.http.middleware import BodyLimitMiddleware

BODY = 2 * 2**20  # far over the 4 KiB limit, well inside the drain bound


async def _ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (message := await receive())["type"] == "http.request" and message.get("more_body"):
        pass  # read the body as an app does (the middleware cuts it off past the limit)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _serve(app: Any) -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.05)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def port() -> Iterator[int]:
    yield from _serve(BodyLimitMiddleware(_ok, max_bytes=4096))


def _post_big(port: int, *, chunked: bool) -> bytes:
    """Send the whole body, then read the reply; ``b"RESET"`` when the connection was reset."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        if chunked:
            head = b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            piece = b"x" * 65536
            body = (b"%x\r\n" % len(piece) + piece + b"\r\n") * (BODY // len(piece)) + b"0\r\n\r\n"
        else:
            head = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % BODY
            body = b"x" * BODY
        try:
            s.sendall(head + body)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        except (ConnectionResetError, BrokenPipeError):
            return b"RESET"
        return reply


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_every_client_reads_the_413(port: int, chunked: bool) -> None:
    replies = [_post_big(port, chunked=chunked) for _ in range(10)]
    statuses = [r.split(b"\r\n", 1)[0] for r in replies]
    assert statuses == [b"HTTP/1.1 413 Request Entity Too Large"] * 10
    assert all(b"payload_too_large" in r and b"connection: close" in r.lower() for r in replies)
