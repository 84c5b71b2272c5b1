"""Rank 0's start-up phases (``service.jobs.phases``), sent in order off the training thread.

``PhaseSender.mark(phase)`` returns at once; a background thread posts each phase once, in the
order marked, to ``POST .../phases`` (so the API measures each from the one before). A phase
that cannot be delivered is logged and dropped: it is a measurement, never a reason to fail
or slow a run.
"""

from __future__ import annotations

import logging
import queue
import threading
from datetime import UTC, datetime

from worker.internal_api import ApiError, InternalApi

__all__ = ["PhaseSender"]

log = logging.getLogger(__name__)


class PhaseSender:
    def __init__(self, api: InternalApi) -> None:
        self._api = api
        self._sent: set[str] = set()
        self._queue: queue.Queue[tuple[str, datetime] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="shunter-phases", daemon=True)
        self._thread.start()

    def mark(self, phase: str, at: datetime | None = None) -> None:
        """Rank 0 reached ``phase`` (now, or at ``at``); later marks of it are ignored."""
        if phase in self._sent:
            return
        self._sent.add(phase)
        self._queue.put((phase, at or datetime.now(UTC)))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            phase, at = item
            try:
                self._api.phase(phase, at)
            except ApiError as e:
                log.warning("start-up phase %s not recorded: %s", phase, e)

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what was marked (bounded wait) and stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout_s)
