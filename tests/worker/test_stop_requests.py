"""Rank 0's ear for checkpoint-now (``StopWatch`` polling the heartbeat), the reporter that
hands it to the loop, and ``RestartWatch`` turning Ray Train worker-group restarts into one
API call each (httpx.MockTransport: a small real API; fake Ray objects with Ray's shape)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

from storage import checkpoint_step
from worker.checkpoint_callback import RestartWatch
from worker.internal_api import InternalApi, RetryPolicy, StopWatch
from worker.outbox import PostOutbox
from worker.ray_reporter import RayReporter


class Api:
    """Heartbeats answer ``checkpoint_now`` once ``stop`` is set; records every call."""

    def __init__(self) -> None:
        self.stop: dict[str, Any] | None = None
        self.calls: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.path.rsplit("/", 1)[1]
        with self.lock:
            self.calls.append((path, body))
        if path == "heartbeat":
            out: dict[str, Any] = {"lease_expires_at": "x", "cancel_requested": False}
            out |= self.stop or {"checkpoint_now": False}
            return httpx.Response(200, json=out)
        return httpx.Response(200, json={"status": "ok"})


def _api(fake: Api) -> InternalApi:
    return InternalApi(
        api_url="http://api",
        token="t",
        job_id="job-1",
        attempt=2,
        transport=httpx.MockTransport(fake),
        retry=RetryPolicy(attempts=1),
    )


def test_stop_watch_hears_the_request_and_the_reporter_passes_it_on() -> None:
    fake = Api()
    watch = StopWatch(_api(fake), interval_s=0.02)
    reporter = RayReporter(rank=0, sender=None, resume_from=None, stop_watch=watch)
    time.sleep(0.1)
    assert reporter.stop_requested() is None
    fake.stop = {"checkpoint_now": True, "stop_cause": "pause", "stop_detail": "paused by ann"}
    deadline = time.monotonic() + 5
    while reporter.stop_requested() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reporter.stop_requested() == "pause: paused by ann"
    polls = len(fake.calls)
    time.sleep(0.1)
    assert len(fake.calls) == polls  # it stops polling once told
    reporter.close()
    # Other ranks have no watch: only rank 0's answer counts (the loop broadcasts it).
    assert RayReporter(rank=1, sender=None, resume_from=None).stop_requested() is None


def test_stop_watch_keeps_polling_through_api_errors() -> None:
    answers = iter([503, 200])

    def flaky(request: httpx.Request) -> httpx.Response:
        code = next(answers, 200)
        if code != 200:
            return httpx.Response(code)
        out = {"lease_expires_at": "x", "cancel_requested": False, "checkpoint_now": True}
        return httpx.Response(200, json=out)

    api = InternalApi(
        api_url="http://api",
        token="t",
        job_id="j",
        attempt=1,
        transport=httpx.MockTransport(flaky),
        retry=RetryPolicy(attempts=1),
    )
    watch = StopWatch(api, interval_s=3600)  # drive it by hand
    assert watch.poll() is False and watch.reason is None
    assert watch.poll() is True and watch.reason == "preempt: no reason given"
    watch.close()


def _group(nodes: dict[int, str]) -> Any:
    workers = [
        SimpleNamespace(
            distributed_context=SimpleNamespace(world_rank=r), metadata=SimpleNamespace(node_ip=ip)
        )
        for r, ip in nodes.items()
    ]
    return SimpleNamespace(get_workers=lambda: workers)


class ActorDiedError(RuntimeError):
    pass


def test_restart_watch_reports_lost_rank_node_cause_and_resume_step(tmp_path: Path) -> None:
    fake = Api()
    watch = RestartWatch(
        api_url="http://api", token="t", job_id="job-1", attempt=2, resume_from="/o/checkpoint-4"
    )
    # Sent through the attempt's on-disk outbox (re-sent until it lands, in order).
    watch._outbox = outbox = PostOutbox(_api(fake), path=tmp_path / "outbox.jsonl")
    watch.after_worker_group_start(_group({0: "10.0.0.1", 1: "10.0.0.2"}))
    assert fake.calls == []  # the first group is no restart
    ckpt = SimpleNamespace(checkpoint=object())
    watch.after_report(ckpt, [{"step": 8, "loss": 1.0}, {"step": 8}])
    watch.after_report(SimpleNamespace(checkpoint=None), [{"step": 9}])  # no checkpoint: no move
    status = SimpleNamespace(
        errors={
            0: RuntimeError("gloo: connection reset by peer"),
            1: ActorDiedError("The actor died unexpectedly\nip: 10.0.0.2"),
        }
    )
    watch.after_worker_group_poll_status(status)
    watch.after_worker_group_start(_group({0: "10.0.0.1", 1: "10.0.0.3"}))
    assert outbox.flush(10)
    assert fake.calls == [
        (
            "restarts",
            {
                "rank": 1,
                "node": "10.0.0.2",
                "cause": "ActorDiedError: The actor died unexpectedly",
                "resumed_from_step": 8,
                "seq": 1,  # the attempt's first restart: the service keeps one event per seq
            },
        )
    ]
    # The callback travels to the Train controller by pickle, without its outbox (a thread).
    assert watch.__getstate__()["_outbox"] is None
    outbox.close()


def test_checkpoint_step() -> None:
    assert checkpoint_step("/s/job-1/checkpoint-120") == 120
    assert checkpoint_step(None) == 0
    assert checkpoint_step("/s/job-1/final") == 0
    assert checkpoint_step("s3://b/p/job-1/checkpoint-7/") == 7
