"""The internal-API client: retry/backoff on transient errors, 409 fencing, the bounded
non-blocking metrics sender and its flush before a checkpoint (httpx.MockTransport: a real
small API, no mocks of our code)."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from worker.driver import Heartbeat
from worker.internal_api import (
    ApiRejected,
    ApiUnavailable,
    AttemptFenced,
    InternalApi,
    MetricsSender,
    RetryPolicy,
)


class FakeApi:
    """Answers the internal endpoints; ``script`` is a queue of status codes to answer first."""

    def __init__(self, script: list[int | str] | None = None) -> None:
        self.script = list(script or [])
        self.calls: list[tuple[str, str, Any]] = []
        self.points: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        with self.lock:
            self.calls.append((request.method, request.url.path, body))
            if self.down:
                raise httpx.ConnectError("refused", request=request)
            if self.script:
                code = self.script.pop(0)
                if code == "conn":
                    raise httpx.ConnectError("refused", request=request)
                return httpx.Response(int(code), json={"detail": "scripted"})
            if request.url.path.endswith("/metrics"):
                self.points += body["points"]
                return httpx.Response(200, json={"accepted": len(body["points"])})
            if request.url.path.endswith("/heartbeat"):
                return httpx.Response(
                    200, json={"lease_expires_at": "x", "cancel_requested": False}
                )
            return httpx.Response(200, json={"ok": True})


def client(fake: FakeApi, attempts: int = 4) -> tuple[InternalApi, list[float]]:
    sleeps: list[float] = []
    api = InternalApi(
        api_url="http://api",
        token="t",
        job_id="job-1",
        attempt=2,
        retry=RetryPolicy(attempts=attempts, base_s=0.01, max_s=0.04),
        transport=httpx.MockTransport(fake),
        sleep=sleeps.append,
    )
    return api, sleeps


def test_paths_and_token() -> None:
    fake = FakeApi()
    api, _ = client(fake)
    api.heartbeat()
    method, path, _ = fake.calls[0]
    assert (method, path) == ("POST", "/v1/internal/jobs/job-1/attempts/2/heartbeat")


@pytest.mark.parametrize("transient", [500, 502, 503, 504, 429, "conn"])
def test_transient_errors_are_retried_with_capped_backoff(transient: int | str) -> None:
    fake = FakeApi([transient, transient])
    api, sleeps = client(fake)
    api.status("running")
    assert len(fake.calls) == 3
    assert len(sleeps) == 2 and all(0 < s <= 0.04 for s in sleeps)
    assert sleeps[1] >= sleeps[0] / 2  # grows (full jitter on the upper half)


def test_gives_up_after_the_budget() -> None:
    fake = FakeApi([503] * 10)
    api, sleeps = client(fake, attempts=3)
    with pytest.raises(ApiUnavailable, match="3 tries"):
        api.status("running")
    assert len(fake.calls) == 3 and len(sleeps) == 2


def test_409_fences_at_once_and_4xx_is_not_retried() -> None:
    fake = FakeApi([409])
    api, _ = client(fake)
    with pytest.raises(AttemptFenced):
        api.metrics([{"step": 1, "name": "loss", "value": 1.0}])
    assert len(fake.calls) == 1
    fake = FakeApi([401])
    api, _ = client(fake)
    with pytest.raises(ApiRejected) as e:
        api.heartbeat()
    assert e.value.status_code == 401 and len(fake.calls) == 1


def test_backoff_policy_is_capped() -> None:
    p = RetryPolicy(base_s=0.2, max_s=5.0)
    for n in range(1, 12):
        d = p.delay(n)
        cap = min(5.0, 0.2 * 2 ** (n - 1))
        assert cap / 2 <= d <= cap


def _wait(cond: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.01)


def test_sender_put_never_blocks_and_ships_everything_in_order() -> None:
    fake = FakeApi()
    api, _ = client(fake)
    sender = MetricsSender(api, batch_size=50, interval_s=0.05)
    t0 = time.perf_counter()
    for step in range(1, 201):
        sender.put(step, {"loss": 1.0 / step, "lr": 0.1})
    put_s = time.perf_counter() - t0
    sender.close()
    assert put_s < 0.5  # 200 puts, no I/O on the caller's thread
    assert [(p["step"], p["name"]) for p in fake.points] == [
        (s, n) for s in range(1, 201) for n in ("loss", "lr")
    ]
    assert sender.dropped == 0 and sender.pending() == 0


def test_sender_keeps_points_while_the_api_is_down_and_delivers_later() -> None:
    fake = FakeApi()
    api, _ = client(fake, attempts=2)
    sender = MetricsSender(api, batch_size=10, interval_s=0.02)
    fake.down = True
    for step in range(1, 31):
        sender.put(step, {"loss": float(step)})
    _wait(lambda: len(fake.calls) >= 4)  # it tried, failed, kept the points
    assert fake.points == [] and sender.pending() == 30
    fake.down = False
    _wait(lambda: len(fake.points) == 30)
    sender.close()
    assert [p["step"] for p in fake.points] == list(range(1, 31))


def test_sender_buffer_is_bounded_and_drops_the_oldest() -> None:
    fake = FakeApi()
    fake.down = True
    api, _ = client(fake, attempts=1)
    sender = MetricsSender(api, max_points=5, batch_size=100, interval_s=10)
    for step in range(1, 9):
        sender.put(step, {"loss": float(step)})
    assert sender.pending() == 5 and sender.dropped == 3
    fake.down = False
    sender.close()
    assert [p["step"] for p in fake.points] == [4, 5, 6, 7, 8]


def test_flush_returns_once_everything_put_is_delivered() -> None:
    fake = FakeApi()
    api, _ = client(fake)
    sender = MetricsSender(api, batch_size=1000, interval_s=60)  # would otherwise wait a minute
    for step in range(1, 5):
        sender.put(step, {"loss": float(step)})
    t0 = time.monotonic()
    assert sender.flush(timeout_s=10)
    assert time.monotonic() - t0 < 5
    assert [p["step"] for p in fake.points] == [1, 2, 3, 4] and sender.pending() == 0
    assert sender.flush(timeout_s=1)  # nothing waiting: returns at once
    sender.close()


def test_flush_gives_up_after_its_timeout_while_the_api_is_down() -> None:
    fake = FakeApi()
    fake.down = True
    api, _ = client(fake, attempts=1)
    sender = MetricsSender(api, batch_size=1000, interval_s=60)
    sender.put(1, {"loss": 1.0})
    t0 = time.monotonic()
    assert not sender.flush(timeout_s=0.5)
    assert 0.4 < time.monotonic() - t0 < 5
    assert sender.pending() == 1  # kept for later, not dropped
    fake.down = False
    sender.close()
    assert [p["step"] for p in fake.points] == [1]


def test_sender_stops_on_409() -> None:
    fake = FakeApi([409])
    api, _ = client(fake)
    sender = MetricsSender(api, batch_size=1, interval_s=0.01)
    sender.put(1, {"loss": 1.0})
    _wait(sender.fenced.is_set)
    sender.put(2, {"loss": 1.0})
    sender.close(timeout_s=2)
    assert fake.points == []


def test_heartbeat_stops_the_run_on_cancel_or_fence_and_survives_outages() -> None:
    fake = FakeApi(["conn"])
    api, _ = client(fake, attempts=1)
    beat = Heartbeat(api, interval_s=0.01, on_stop=lambda r: None)
    assert beat.beat() is None  # an outage is not a reason to stop
    assert beat.beat() is None
    fake.script = [409]
    assert (beat.beat() or "").startswith("fenced")

    def cancel(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"lease_expires_at": "x", "cancel_requested": True})

    api2 = InternalApi(
        api_url="http://api",
        token="t",
        job_id="j",
        attempt=1,
        transport=httpx.MockTransport(cancel),
    )
    stopped: list[str] = []
    beat2 = Heartbeat(api2, interval_s=0.01, on_stop=stopped.append)
    beat2.start()
    _wait(lambda: stopped == ["cancel requested"])
    limited = Heartbeat(api2, interval_s=1, on_stop=stopped.append, max_runtime_s=0.001)
    time.sleep(0.01)
    assert limited.beat() == "max_runtime_seconds exceeded"


def test_a_checkpoint_is_reported_to_ray_only_after_its_metrics_are_delivered(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 may be lost right after Ray commits a checkpoint; the resume then skips every
    step up to it, so their metrics must already be in the API (seen lost in a CI run)."""
    import ray.train

    from worker.ray_reporter import RayReporter

    fake = FakeApi()
    api, _ = client(fake)
    sender = MetricsSender(api, batch_size=1000, interval_s=60)
    seen_at_report: list[list[int]] = []
    monkeypatch.setattr(
        ray.train, "report", lambda *a, **k: seen_at_report.append([p["step"] for p in fake.points])
    )
    reporter = RayReporter(rank=0, sender=sender, resume_from=None, total_steps=4)
    for step in range(1, 4):
        reporter.report(step, {"loss": 1.0})
    reporter.report(4, {"loss": 1.0}, checkpoint_dir=tmp_path)
    assert seen_at_report == [[1, 2, 3, 4]]
    reporter.close()


def test_points_a_checkpoint_ran_ahead_of_survive_the_service_dying(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``shunter serve`` SIGKILLed during the flush at a checkpoint: the checkpoint is on disk,
    its last points never reached the API, and the next attempt resumes after them. The
    spool carries them over: the next attempt's rank 0 sends them first (once seen: 37 of 40
    loss points)."""
    import math

    import ray.train

    from worker.ray_reporter import RayReporter

    monkeypatch.setattr(ray.train, "report", lambda *a, **k: None)
    spool = tmp_path / "metrics-spool.jsonl"
    dead = FakeApi()
    api, _ = client(dead, attempts=1)
    sender = MetricsSender(api, batch_size=1000, interval_s=60)
    first = RayReporter(rank=0, sender=sender, resume_from=None, total_steps=8, spool=spool)
    first.flush_timeout_s = 0.5
    dead.down = True  # the service died
    for step in range(1, 4):
        first.report(step, {"loss": 1.0 / step})
    first.report(4, {"loss": math.nan}, checkpoint_dir=tmp_path / "checkpoint-4")
    assert dead.points == [] and spool.exists()  # not delivered, but spooled
    assert '"value": "NaN"' in spool.read_text()
    # The worker dies with the service: nothing more is sent by this attempt.
    sender.close(timeout_s=0.1)

    alive = FakeApi()
    api2, _ = client(alive)
    second = RayReporter(
        rank=0, sender=MetricsSender(api2, interval_s=60), resume_from=None, spool=spool
    )
    got = [(p["step"], p["name"], p["value"]) for p in alive.points]
    assert got[:3] == [(1, "loss", 1.0), (2, "loss", 0.5), (3, "loss", 1.0 / 3)]
    assert (4, "loss", "NaN") in got  # strict JSON on the wire
    assert not spool.exists()  # delivered: the spool is gone
    # A checkpoint whose flush succeeds leaves no spool behind either.
    second.report(5, {"loss": 0.2}, checkpoint_dir=tmp_path / "checkpoint-5")
    assert not spool.exists() and alive.points[-1]["step"] == 5
    second.close()


def test_phase_sender_posts_each_phase_once_in_order_and_survives_a_refusal() -> None:
    from worker.phases import PhaseSender

    seen: list[dict[str, Any]] = []

    def fake(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body["phase"] == "model_built":
            return httpx.Response(422, json={"message": "no"})  # dropped, not retried
        seen.append(body)
        return httpx.Response(200, json={"status": "ok"})

    api = InternalApi(
        api_url="http://api", token="t", job_id="j", attempt=1,
        transport=httpx.MockTransport(fake), sleep=lambda _s: None,
    )  # fmt: skip
    sender = PhaseSender(api)
    for phase in ("workers_up", "model_built", "first_step", "first_step", "workers_up"):
        sender.mark(phase)
    sender.close()
    assert [b["phase"] for b in seen] == ["workers_up", "first_step"]
    assert all(datetime.fromisoformat(b["time"]).tzinfo is not None for b in seen)
