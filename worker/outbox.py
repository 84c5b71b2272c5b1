"""``PostOutbox``: internal-API posts that must land, kept on disk until they do.

A checkpoint registration that cannot reach the API (the API or its database away, the
worker's node cut off from it) must not be dropped: the API resumes a lost attempt from the
newest checkpoint it knows of. ``put`` appends the post to an ordered queue and returns at
once (training never waits on it); a background thread sends the head, and keeps retrying
it with a capped backoff (``InternalApi.request`` retries a few times itself) until the API
answers, so posts land in the order they were made. The queue is bounded (``max_entries``:
a post beyond it is dropped and counted) and mirrored to a JSONL file (atomic replace on
every change), which a process started again on the same node for the same attempt reads
back. A post the API refuses for good (409: the attempt is fenced; another 4xx) is dropped
with a warning: it can never land. ``flush(timeout_s)`` waits until the queue is empty: the
Train controller calls it when training ends, so the driver's final status never overtakes
a registration.

Only idempotent posts belong here: a post may be sent twice (its reply lost in a cut), so the
service must treat a repeat as a no-op (checkpoints: one row per (job, attempt, step)).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from worker.internal_api import ApiError, ApiRejected, AttemptFenced, InternalApi, json_safe

__all__ = ["PostOutbox"]

log = logging.getLogger(__name__)


class PostOutbox:
    def __init__(
        self,
        api: InternalApi,
        *,
        path: Path,
        max_entries: int = 1000,
        base_s: float = 1.0,
        max_s: float = 10.0,
    ) -> None:
        self._api = api
        self._path = path
        self._max = max_entries
        self._base_s, self._max_s = base_s, max_s
        self._cv = threading.Condition()
        self._queue: list[dict[str, Any]] = self._load()
        self._closing = False
        self.dropped = 0
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="shunter-outbox", daemon=True)
        self._thread.start()

    def _load(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        try:
            lines = self._path.read_text().splitlines()
        except OSError:
            return entries
        for line in lines:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line (never acknowledged either way)
        if entries:
            log.info("re-sending %d posts left in %s", len(entries), self._path)
        return entries[: self._max]

    def _persist(self) -> None:
        """Mirror the queue to disk (caller holds the lock); the file is gone when empty."""
        if not self._queue:
            self._path.unlink(missing_ok=True)
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        with open(tmp, "w") as fh:
            for entry in self._queue:
                fh.write(json.dumps(entry, allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)

    def put(self, path: str, body: dict[str, Any]) -> bool:
        """Queue ``POST path`` with ``body``; False when the queue is full (dropped)."""
        with self._cv:
            if len(self._queue) >= self._max:
                self.dropped += 1
                log.warning("outbox full (%d posts): POST %s dropped", self._max, path)
                return False
            self._queue.append({"path": path, "body": json_safe(body)})
            self._persist()
            self._cv.notify_all()
        return True

    def pending(self) -> int:
        with self._cv:
            return len(self._queue)

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cv:
                while not self._queue and not self._closing:
                    self._cv.wait()
                if not self._queue:
                    return
                head = self._queue[0]
            ok = self._send(head)
            with self._cv:
                if ok is not None:  # landed, or can never land: off the queue
                    self._queue.pop(0)
                    self._persist()
                    self.sent += int(ok)
                    failures = 0
                    self._cv.notify_all()
                    continue
                if self._closing:
                    return  # what is left stays on disk
                failures += 1
                self._cv.wait(min(self._max_s, self._base_s * 2 ** min(failures - 1, 16)))

    def _send(self, entry: dict[str, Any]) -> bool | None:
        """True: landed; False: refused for good (dropped); None: try again later."""
        try:
            self._api.request("POST", entry["path"], entry["body"])
        except (AttemptFenced, ApiRejected) as e:
            log.warning("POST %s refused, dropped: %s", entry["path"], e)
            return False
        except ApiError as e:
            log.warning("POST %s not delivered yet (will retry): %s", entry["path"], e)
            return None
        return True

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued post has landed (or been refused); False on timeout."""
        with self._cv:
            return (
                self._cv.wait_for(lambda: not self._queue or not self._thread.is_alive(), timeout_s)
                and not self._queue
            )

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush within ``timeout_s`` and stop; what is left stays on disk."""
        self.flush(timeout_s)
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join(min(timeout_s, 15.0))
