"""The driver's and workers' client for the service's internal API (per-attempt token).

Everything is under ``/v1/internal/jobs/{job_id}/attempts/{attempt}/`` (docs/contracts.md).
Transient failures (connection errors, 5xx, 429) are retried with capped exponential
backoff; a 409 means this attempt has been fenced (lost, superseded, job terminal) and is
raised at once so the caller stops the run. ``MetricsSender`` is the non-blocking side
channel for per-step metrics: ``put()`` never blocks training; a background thread ships
batches; the buffer is bounded (oldest points are dropped, and counted, when the API stays
down longer than the buffer lasts). ``StopWatch`` is rank 0's ear for checkpoint-now requests
(preemption, pause): it polls the heartbeat and holds the reason once one arrives.

Exceptions::

    ApiError
     ├── AttemptFenced     409: stop this attempt, write nothing more
     ├── ApiRejected       other 4xx (a bug or a bad token): not retried
     └── ApiUnavailable    retries exhausted on transient errors
"""

from __future__ import annotations

import collections
import json
import logging
import math
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sized
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import httpx

__all__ = [
    "ApiError",
    "ApiRejected",
    "ApiUnavailable",
    "AttemptFenced",
    "BatchSender",
    "InternalApi",
    "MetricsSender",
    "RetryPolicy",
    "StopWatch",
    "json_safe",
    "restart_body",
]

log = logging.getLogger(__name__)
B = TypeVar("B")


class ApiError(RuntimeError):
    """Base of this module's errors."""


class AttemptFenced(ApiError):
    """The API answered 409: this attempt is no longer the job's active attempt."""


class ApiRejected(ApiError):
    """A 4xx other than 409/429: retrying would not help."""

    def __init__(self, status_code: int, body: str) -> None:
        super().__init__(f"internal API rejected the request: {status_code} {body[:500]}")
        self.status_code = status_code


class ApiUnavailable(ApiError):
    """Transient errors persisted past the retry budget."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Capped exponential backoff with jitter. ``attempts`` counts the first try too."""

    attempts: int = 6
    base_s: float = 0.2
    max_s: float = 5.0

    def delay(self, retry: int) -> float:
        """Seconds to sleep before retry number ``retry`` (1-based); full jitter on half."""
        capped: float = min(self.max_s, self.base_s * (2 ** (retry - 1)))
        return capped / 2 + random.uniform(0, capped / 2)


_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``"NaN"``, ``"Infinity"`` or
    ``"-Infinity"`` (strict JSON has no such numbers; httpx refuses them with "Out of range
    float values are not JSON compliant", which once failed a diverged job as ``internal``).
    The API parses those strings back into floats where a number is expected."""
    if isinstance(value, float) and not math.isfinite(value):
        return _NON_FINITE[repr(value)]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def restart_body(
    *, rank: int | None, node: str | None, cause: str, resumed_from_step: int, seq: int | None
) -> dict[str, Any]:
    """``POST restarts``: the lost worker, the cause, where the new group resumed, and the
    restart's number in the attempt (``seq``: the service writes one event per number)."""
    body: dict[str, Any] = {
        "rank": rank,
        "node": node,
        "cause": cause[:2000] or "unknown",
        "resumed_from_step": resumed_from_step,
    }
    if seq is not None:
        body["seq"] = seq
    return body


def _json_header(body: Any) -> dict[str, str] | None:
    return None if body is None else {"Content-Type": "application/json"}


class InternalApi:
    """Typed calls to the internal endpoints of one attempt. Thread-safe (httpx.Client is)."""

    def __init__(
        self,
        *,
        api_url: str,
        token: str,
        job_id: str,
        attempt: int,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=f"{api_url.rstrip('/')}/v1/internal/jobs/{job_id}/attempts/{attempt}/",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        """One call with retries (JSON ``body``, or raw ``content``); the decoded JSON reply."""
        last = ""
        for n in range(1, self._retry.attempts + 1):
            try:
                if body is not None:  # JSON has no NaN/Infinity: they travel as strings
                    content = json.dumps(json_safe(body), allow_nan=False).encode()
                r = self._http.request(
                    method, path, content=content, params=params, headers=_json_header(body)
                )
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if r.status_code == 409:
                    raise AttemptFenced(f"attempt {self.attempt} fenced: {r.text[:300]}")
                if r.status_code < 400:
                    return r.json() if r.content else None
                if r.status_code not in _TRANSIENT_STATUS:
                    raise ApiRejected(r.status_code, r.text)
                last = f"HTTP {r.status_code}"
            if n < self._retry.attempts:
                self._sleep(self._retry.delay(n))
        raise ApiUnavailable(
            f"{method} {path}: gave up after {self._retry.attempts} tries ({last})"
        )

    # -- the endpoints -------------------------------------------------------------------
    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = self.request("GET", "spec")
        return out

    def heartbeat(self) -> dict[str, Any]:
        out: dict[str, Any] = self.request("POST", "heartbeat", {})
        return out

    def status(
        self,
        status: str,
        *,
        error: dict[str, str] | None = None,
        final_model_uri: str | None = None,
        step: int | None = None,
        versions: dict[str, Any] | None = None,
    ) -> None:
        """``step``: with ``preempted``, the step the attempt checkpointed at. ``versions``:
        with ``running``, the code and package versions this attempt runs with."""
        body: dict[str, Any] = {
            "status": status,
            "error": error,
            "final_model_uri": final_model_uri,
        }
        if step is not None:
            body["step"] = step
        if versions is not None:
            body["versions"] = versions
        self.request("POST", "status", body)

    def restart(
        self,
        *,
        rank: int | None,
        node: str | None,
        cause: str,
        resumed_from_step: int,
        seq: int | None = None,
    ) -> None:
        """Ray Train restarted the worker group of this attempt (a worker was lost)."""
        body = restart_body(
            rank=rank, node=node, cause=cause, resumed_from_step=resumed_from_step, seq=seq
        )
        self.request("POST", "restarts", body)

    def phase(self, phase: str, at: datetime) -> None:
        """Rank 0 reached a start-up phase (``service.jobs.phases``) at ``at``."""
        self.request("POST", "phases", {"phase": phase, "time": at.isoformat()})

    def worker(self, *, rank: int, pid: int, node_id: str, node_ip: str) -> None:
        """This rank's process and node, for the service's stack dumps of a hung job."""
        self.request(
            "POST", "workers", {"rank": rank, "pid": pid, "node_id": node_id, "node_ip": node_ip}
        )

    def metrics(self, points: list[dict[str, Any]], progress: dict[str, Any] | None = None) -> None:
        self.request("POST", "metrics", {"points": points, "progress": progress})

    def checkpoint(
        self, *, step: int, uri: str, nbytes: int, metrics: dict[str, Any], verified: bool
    ) -> dict[str, Any]:
        body = {"step": step, "uri": uri, "bytes": nbytes, "metrics": metrics, "verified": verified}
        out: dict[str, Any] = self.request("POST", "checkpoints", body)
        return out


class BatchSender(ABC, Generic[B]):
    """The loop of a background batching sender (``MetricsSender``'s metric points,
    ``worker.log_shipper``'s output bytes): one thread wakes every ``interval_s``, or at once
    when a full batch waits, a caller flushes or the owner closes; it sends one batch and,
    once closing, ends when the buffer is empty or a send fails. A batch the API did not take
    stays for the next round; 409 sets ``fenced`` and ends the sending for good. A subclass
    says what a batch is: ``_take`` it, ``_post`` it, forget it once ``_sent``.
    """

    _buf: Sized  # what waits to be sent: its len() is compared with the batch size
    _what = "a"  # names the batch in the log ("metrics batch not sent")

    def __init__(self, api: InternalApi, *, interval_s: float, batch: int) -> None:
        self._api = api
        self._interval_s = interval_s
        self._batch = batch
        self._cv = threading.Condition()
        self._closing = False
        self._flushing = 0  # callers waiting in a flush: send now, not after interval_s
        self.fenced = threading.Event()

    @abstractmethod
    def _take(self) -> B | None:
        """(Under the lock.) The next batch to send; None when nothing waits."""

    @abstractmethod
    def _post(self, batch: B) -> Any:
        """Send ``batch`` to the API (raises ``ApiError``); the API's reply."""

    @abstractmethod
    def _sent(self, batch: B, reply: Any) -> None:
        """(Under the lock.) Forget what the API took of ``batch``."""

    def _send_once(self) -> bool:
        """Send one batch; True when it was sent or nothing waited."""
        with self._cv:
            batch = self._take()
        if batch is None:
            return True
        try:
            reply = self._post(batch)
        except AttemptFenced:
            self.fenced.set()
            return False
        except ApiError as e:
            log.warning("%s batch not sent (will retry): %s", self._what, e)
            return False
        with self._cv:
            self._sent(batch, reply)
            self._cv.notify_all()  # wakes flush() callers
        return True

    def _run(self) -> None:
        while not self.fenced.is_set():
            with self._cv:
                if not (self._closing or self._flushing) and len(self._buf) < self._batch:
                    self._cv.wait(self._interval_s)
                closing = self._closing
            ok = self._send_once()
            if closing and (not ok or not self._buf):
                return

    def _close(self) -> None:
        """Tell the thread to send what is left and end."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()


_Points = tuple[int, list[dict[str, Any]], dict[str, Any] | None]


class MetricsSender(BatchSender[_Points]):
    """Background batching of metric points to ``POST metrics``.

    ``put`` appends to a bounded deque and returns at once (O(1), no I/O). The thread wakes
    every ``interval_s`` (or when ``batch_size`` points wait), sends up to ``batch_size``
    points, and on a transient failure keeps them for the next round. On 409 it sets
    ``fenced`` and stops sending; the owner checks ``fenced`` and stops the run.
    ``flush`` waits (bounded) until everything put so far has been delivered: the reporter
    calls it before a checkpoint is reported, so a registered checkpoint at step N implies
    the API holds the metrics of steps <= N. Without that, losing rank 0 right after the
    checkpoint loses the last second of points for good, since a resume retrains only the
    steps after N.
    """

    def __init__(
        self,
        api: InternalApi,
        *,
        max_points: int = 10_000,
        batch_size: int = 500,
        interval_s: float = 1.0,
    ) -> None:
        super().__init__(api, interval_s=interval_s, batch=batch_size)
        # (sequence number, point): the number lets a sent batch be removed exactly even if
        # the deque dropped old points while the batch was in flight.
        self._buf: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(
            maxlen=max_points
        )
        self._seq = 0
        self._progress: dict[str, Any] | None = None
        self.dropped = 0
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="shunter-metrics", daemon=True)
        self._thread.start()

    def put(
        self, step: int, metrics: dict[str, float], progress: dict[str, Any] | None = None
    ) -> None:
        now = datetime.now(UTC).isoformat()
        with self._cv:
            for name, value in metrics.items():
                if len(self._buf) == self._buf.maxlen:
                    self.dropped += 1  # deque drops the oldest on append
                self._seq += 1
                point = {"step": step, "name": name, "value": float(value), "time": now}
                self._buf.append((self._seq, point))
            if progress is not None:
                self._progress = progress
            if len(self._buf) >= self._batch:
                self._cv.notify()

    def pending(self) -> int:
        with self._cv:
            return len(self._buf)

    def pending_points(self) -> list[dict[str, Any]]:
        """A copy of the points not yet acknowledged by the API (for the reporter's spool)."""
        with self._cv:
            return [dict(point) for _, point in self._buf]

    def put_points(self, points: list[dict[str, Any]]) -> None:
        """Queue points as they were (step, name, value, time): a spool left by an earlier
        attempt. ``value`` may be a float or its ``json_safe`` string."""
        with self._cv:
            for point in points:
                if len(self._buf) == self._buf.maxlen:
                    self.dropped += 1
                self._seq += 1
                value = point["value"]
                value = float(value)  # "NaN"/"Infinity" strings read back as floats
                self._buf.append((self._seq, {**point, "value": value}))
            self._cv.notify()

    _what = "metrics"

    def _take(self) -> _Points | None:
        """(last sequence number, points, progress): up to a batch of points."""
        n = min(self._batch, len(self._buf))
        if n == 0 and self._progress is None:
            return None
        last = self._buf[n - 1][0] if n else 0
        return last, [self._buf[i][1] for i in range(n)], self._progress

    def _post(self, batch: _Points) -> None:
        self._api.metrics(batch[1], batch[2])

    def _sent(self, batch: _Points, reply: Any) -> None:
        last_seq, points, progress = batch
        while self._buf and self._buf[0][0] <= last_seq:
            self._buf.popleft()
        if self._progress is progress:
            self._progress = None
        self.sent += len(points)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Block until every point put before this call is delivered; False on timeout or
        when fenced (the API is down or refuses this attempt: training goes on regardless)."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            target = self._seq
            self._flushing += 1
            self._cv.notify_all()
            try:
                while self._buf and self._buf[0][0] <= target and not self.fenced.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._thread.is_alive():
                        return False
                    self._cv.wait(min(left, 0.5))
            finally:
                self._flushing -= 1
        return not self.fenced.is_set()

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush what is buffered (best effort within ``timeout_s``) and stop the thread."""
        self._close()
        self._thread.join(timeout_s)


class StopWatch:
    """Polls ``POST heartbeat`` every ``interval_s`` in a daemon thread; once a reply says
    ``checkpoint_now``, ``reason`` holds ``"<cause>: <detail>"`` for good and polling stops.

    ``reason`` is a plain attribute read at every step boundary (no I/O, no lock: one
    reference assignment). API errors are logged and retried at the next poll; a 409 ends the
    polling (the driver's own heartbeat ends a fenced attempt).
    """

    def __init__(self, api: InternalApi, *, interval_s: float = 2.0) -> None:
        self._api = api
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.reason: str | None = None
        self._thread = threading.Thread(target=self._run, name="shunter-stopwatch", daemon=True)
        self._thread.start()

    def poll(self) -> bool:
        """One heartbeat; True when polling should end (a request arrived, or fenced)."""
        try:
            reply = self._api.heartbeat()
        except AttemptFenced:
            return True
        except ApiError as e:
            log.warning("stop-request poll failed (will retry): %s", e)
            return False
        if reply.get("checkpoint_now"):
            cause = reply.get("stop_cause") or "preempt"
            self.reason = f"{cause}: {reply.get('stop_detail') or 'no reason given'}"
            return True
        return False

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            if self.poll():
                return

    def close(self) -> None:
        self._stop.set()
