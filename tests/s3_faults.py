"""A fault-injecting HTTP proxy in front of an S3 server (``tests.s3_server``'s moto): a share
of requests is answered ``503 SlowDown``, has its connection reset, stalls and is then dropped,
or has its answer cut half-way (headers and part of the body, then a reset).

    with running_s3() as s3, S3Faults(s3.endpoint, rate=0.2, seed=7) as proxy:
        env = {**s3.env, "AWS_ENDPOINT_URL": proxy.endpoint}

Which requests fail is drawn from ``random.Random(seed)`` in arrival order, and the kind of
each fault cycles through ``kinds``, so a run is repeatable up to thread interleaving.
``down = True`` answers every request 503 (a lasting outage) until it is set back;
``counts`` says what was injected. Stop it by ``stop()`` or the ``with`` block (one thread,
no process).
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["KINDS", "S3Faults"]

KINDS = ("503", "reset", "stall", "cut")
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class S3Faults:
    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.2,
        seed: int = 0,
        kinds: tuple[str, ...] = KINDS,
        stall_s: float = 1.0,
    ) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; use {KINDS}")
        target = urlsplit(upstream)
        self.upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self.rate, self.kinds, self.stall_s = rate, kinds, stall_s
        self.down = False
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> S3Faults:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                owner._handle(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> S3Faults:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _draw(self) -> str | None:
        with self._lock:
            self.counts["requests"] += 1
            if self.down:
                self.counts["down"] += 1
                return "503"
            if self._rng.random() >= self.rate:
                return None
            kind = self.kinds[sum(self.counts[k] for k in self.kinds) % len(self.kinds)]
            self.counts[kind] += 1
            return kind

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = _read_body(h)
        fault = self._draw()
        if fault == "503":
            h.send_response(503, "Slow Down")
            h.send_header("content-type", "application/xml")
            h.send_header("content-length", str(len(_SLOW_DOWN)))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(_SLOW_DOWN)
            return
        if fault == "stall":
            time.sleep(self.stall_s)
        if fault in ("reset", "stall"):
            _reset(h)
            return
        status, reason, headers, payload = self._forward(h, body)
        h.send_response(status, reason)
        for k, v in headers:
            # A HEAD's length is the object's; any other answer's is the body read here
            # (the upstream may have sent it chunked).
            if k.lower() not in _HOP and (h.command == "HEAD" or k.lower() != "content-length"):
                h.send_header(k, v)
        if h.command != "HEAD":
            h.send_header("content-length", str(len(payload)))
        if fault == "cut" and len(payload) >= 2:
            h.end_headers()
            h.wfile.write(payload[: len(payload) // 2])
            h.wfile.flush()
            _reset(h)
            return
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(payload)

    def _forward(
        self, h: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
            headers.pop("Expect", None)
            conn.request(h.command, h.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            return resp.status, resp.reason, resp.getheaders(), payload
        finally:
            conn.close()


def _read_body(h: BaseHTTPRequestHandler) -> bytes:
    """The request's body: by its Content-Length, or de-chunked (the SDK streams parts)."""
    if "chunked" not in (h.headers.get("transfer-encoding") or "").lower():
        length = int(h.headers.get("content-length") or 0)
        return h.rfile.read(length) if length else b""
    parts = []
    while True:
        size = int(h.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while h.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(parts)
        parts.append(h.rfile.read(size))
        h.rfile.readline()  # the CRLF after each chunk


def _reset(h: BaseHTTPRequestHandler) -> None:
    """Close the client's connection with a TCP reset (SO_LINGER 0), not a clean FIN."""
    sock: socket.socket = h.connection
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.close_connection = True
    with contextlib.suppress(OSError):
        h.wfile.flush()
    sock.close()
