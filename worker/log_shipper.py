"""Ship the driver process's output (its own, and the Ray Train workers' that Ray forwards to
the driver with ``log_to_driver``) to ``POST /v1/internal/.../logs``, so the API serves it
after Ray is gone.

``LogShipper.start()`` points file descriptors 1 and 2 at a pipe; a reader thread copies every
chunk to the original stdout (Ray's job log keeps working) and into a bounded buffer; a sender
thread posts batches with their byte offset in the stream (idempotent on the server), about
every ``interval_s``. When the API stays down longer than the buffer lasts, the oldest bytes
are replaced by one marker line. ``close()`` flushes (bounded) and restores the descriptors.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from worker.internal_api import BatchSender, InternalApi

__all__ = ["LogShipper", "flush_installed"]

_installed: LogShipper | None = None


class LogShipper(BatchSender[tuple[bytes, int]]):
    def __init__(
        self,
        api: InternalApi,
        *,
        interval_s: float = 1.0,
        batch_bytes: int = 256 * 1024,
        buffer_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        super().__init__(api, interval_s=interval_s, batch=batch_bytes)
        self._max = buffer_bytes
        self._buf: bytearray = bytearray()
        self._offset = 0  # stream offset of self._buf[0]
        self.dropped = 0
        self._saved: dict[int, int] = {}
        self._read_fd = -1
        self._threads: list[threading.Thread] = []

    def start(self, *, capture: bool = True) -> None:
        """Start shipping; ``capture``: take over file descriptors 1 and 2 (the driver), else
        only what ``feed`` is given is shipped."""
        global _installed
        workers = [(self._run, "shunter-log-send")]
        if capture:
            sys.stdout.flush()
            sys.stderr.flush()
            r, w = os.pipe()
            for fd in (1, 2):
                self._saved[fd] = os.dup(fd)
                os.dup2(w, fd)
            os.close(w)
            self._read_fd = r
            workers.insert(0, (self._read, "shunter-log-read"))
        for target, name in workers:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        _installed = self

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            os.write(self._saved.get(1, 1), chunk)  # Ray's job log still gets it
            self.feed(chunk)

    def feed(self, chunk: bytes) -> None:
        """Add output to ship (the reader thread calls it; tests may too)."""
        with self._cv:
            self._buf += chunk
            over = len(self._buf) - self._max
            if over > 0:
                self.dropped += over
                marker = f"[shunter: {over} bytes of output dropped: API unreachable]\n".encode()
                del self._buf[:over]
                self._buf[:0] = marker
            if len(self._buf) >= self._batch:
                self._cv.notify_all()

    _what = "log"

    def _take(self) -> tuple[bytes, int] | None:
        """(bytes, their stream offset): up to a batch from the buffer's start."""
        data = bytes(self._buf[: self._batch])
        return (data, self._offset) if data else None

    def _post(self, batch: tuple[bytes, int]) -> Any:
        data, offset = batch
        return self._api.request("POST", "logs", content=data, params={"offset": offset})

    def _sent(self, batch: tuple[bytes, int], reply: Any) -> None:
        data, offset = batch
        del self._buf[: len(data)]
        # The server's length is the truth (it skips what it already has).
        self._offset = int(reply["next_offset"]) if reply else offset + len(data)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything fed so far is delivered; False on timeout or when fenced."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            self._cv.notify_all()
            while self._buf and not self.fenced.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.2))
        return not self.fenced.is_set()

    def close(self, timeout_s: float = 10.0) -> None:
        """Restore stdout/stderr, ship what is left (bounded), stop the threads."""
        global _installed
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)  # the pipe's write ends close: the reader sees EOF
        for t in self._threads:  # the reader first (EOF), then the sender drains the rest
            if t.name == "shunter-log-send":
                self._close()
            t.join(timeout_s)
        for saved in self._saved.values():
            os.close(saved)
        self._saved.clear()
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1
        _installed = None


def flush_installed(timeout_s: float) -> None:
    """Flush the running shipper, if any (before ``os._exit``)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if _installed is not None:
        _installed.flush(timeout_s)
