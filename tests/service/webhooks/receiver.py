"""A real webhook receiver for tests: an HTTP server on 127.0.0.1 that records every POST
(headers and body) and answers ``status`` (200 by default; a 3xx carries a Location to
``/elsewhere``). ``drip``: after the status line, send a byte every 50 ms without end.
``answer``: when set, called with (headers, body) of each POST to choose its status instead.
``stop()`` closes the port (the receiver is down); ``start()`` listens again on it."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Receiver"]


class Receiver:
    def __init__(self, port: int = 0, status: int = 200, tls: ssl.SSLContext | None = None) -> None:
        self.port = port
        self.tls = tls
        self.status = status
        self.drip = False
        self.answer: Callable[[dict[str, str], bytes], int] | None = None
        self.received: list[tuple[dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                with owner._lock:
                    owner.received.append((headers, body))
                status = owner.status if owner.answer is None else owner.answer(headers, body)
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("location", "/elsewhere")
                if owner.drip:
                    self.send_header("content-length", str(10**9))
                    self.end_headers()
                    try:
                        for _ in range(2000):
                            self.wfile.write(b"x")
                            self.wfile.flush()
                            time.sleep(0.05)
                    except OSError:
                        return
                    return
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def messages(self) -> list[tuple[dict[str, str], bytes]]:
        with self._lock:
            return list(self.received)
