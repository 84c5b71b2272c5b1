"""A backlog does not hold a new job's webhooks back (issue 32, item 5): with 1,000
deliveries queued to one endpoint by two long-running jobs, a new job's events (two
checkpoints, then succeeded) arrive in event order long before the backlog drains; a
delivery that fails keeps its job's later events behind it (order per job) while other jobs
go on; a dead endpoint's deliveries do not hold back a live one's. Timing is measured in
``bench/webhook_backlog.py``; here every wait is bounded and only order and counts count."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.db.tables import utcnow_py
from service.webhooks.events import WebhookEvent
from service.webhooks.outbox import enqueue
from service.webhooks.sender import DeliveryConfig, DeliveryWorker
from service.webhooks.ssrf import parse_allow
from tests.service.svc_helpers import submit
from tests.service.webhooks.receiver import Receiver
from tests.service.webhooks.test_webhook_outbox import add_endpoint

ALLOW = parse_allow(["127.0.0.1"])
ALL_TYPES = ["job.checkpoint", "job.diverged", "job.hung", "job.succeeded"]
NEW_JOB = [("ckpt-5", "job.checkpoint"), ("ckpt-10", "job.checkpoint"), ("end", "job.succeeded")]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def queue(db: Any, job_id: str, events: list[tuple[str, str]]) -> None:
    """Queue ``(key, type)`` for ``job_id`` in this order, in one transaction; the key is in
    the body as ``data.key``."""

    def _queue(s: Session) -> None:
        for key, type_ in events:
            webhook = WebhookEvent(
                type_=type_, event_key=key, created_at=utcnow_py(), extra={"key": key}
            )
            enqueue(s.connection(), job_id=job_id, webhook=webhook)

    db.write(_queue)


def arrived(receiver: Receiver) -> list[tuple[str, str, str]]:
    """(job id, event key, webhook-id) of every POST, in arrival order."""
    out = []
    for headers, body in receiver.messages():
        data = json.loads(body)["data"]
        out.append((data["id"], data["key"], headers["webhook-id"]))
    return out


def keys(receiver: Receiver, job_id: str) -> list[str]:
    return [k for j, k, _ in arrived(receiver) if j == job_id]


def wait_until(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for deliveries")
        time.sleep(0.02)


def run_worker(db: Any, **config: Any) -> DeliveryWorker:
    worker = DeliveryWorker(db=db, config=DeliveryConfig(allow=ALLOW, **config), interval_s=0.05)
    worker.start()
    return worker


def test_new_job_goes_ahead_of_a_1000_backlog_in_order(
    client: Any, db: Any, make_token: Any, receiver: Receiver
) -> None:
    token = make_token("default")
    add_endpoint(db, events=ALL_TYPES, url=receiver.url)
    hung, diverging, new = (submit(client, token)["id"] for _ in range(3))
    queue(db, hung, [(f"h{i:03d}", "job.hung") for i in range(500)])
    queue(db, diverging, [(f"d{i:03d}", "job.diverged") for i in range(500)])
    queue(db, new, NEW_JOB)  # queued last: a FIFO sends it after all 1,000

    worker = run_worker(db)
    try:
        wait_until(lambda: len(keys(receiver, new)) == 3)
    finally:
        worker.stop()
    assert keys(receiver, new) == ["ckpt-5", "ckpt-10", "end"]
    # Fairness, not speed: each pass deals one head per stream, so the backlog's two streams
    # had a few turns while the new job's three went, not the 1,000 a FIFO sends first.
    got = arrived(receiver)
    last_new = max(i for i, (j, _, _) in enumerate(got) if j == new)
    assert last_new < 100, last_new
    for job_id in (hung, diverging):  # the backlog's own order per job holds too
        sent = keys(receiver, job_id)
        assert sent == sorted(sent) and len(sent) == len(set(sent))
    assert len({m for _, _, m in got}) == len(got)  # no webhook-id twice


def test_a_failed_delivery_holds_its_job_back_not_others(
    client: Any, db: Any, make_token: Any, receiver: Receiver
) -> None:
    token = make_token("default")
    add_endpoint(db, events=ALL_TYPES, url=receiver.url)
    flaky, other = submit(client, token)["id"], submit(client, token)["id"]
    failed: list[str] = []

    def answer(headers: dict[str, str], body: bytes) -> int:
        if json.loads(body)["data"]["key"] == "ckpt-5" and not failed:
            failed.append(headers["webhook-id"])
            return 503
        return 204

    receiver.answer = answer
    queue(db, flaky, NEW_JOB)
    queue(db, other, [("o1", "job.hung"), ("o2", "job.succeeded")])
    worker = run_worker(db, retry_delays_s=(0.5,) * 5)
    try:
        wait_until(lambda: len(arrived(receiver)) == 6)
    finally:
        worker.stop()
    # The flaky job's first checkpoint failed once; its later events waited for the retry.
    assert keys(receiver, flaky) == ["ckpt-5", "ckpt-5", "ckpt-10", "end"]
    # The other job did not wait for it: both its events came before the retry.
    got = arrived(receiver)
    retry = [i for i, (_, _, m) in enumerate(got) if m == failed[0]][1]
    assert [k for j, k, _ in got[:retry] if j == other] == ["o1", "o2"]


def test_a_dead_endpoint_does_not_hold_back_a_live_one(
    client: Any, db: Any, make_token: Any, receiver: Receiver
) -> None:
    token = make_token("default")
    dead = Receiver().start()
    dead_url = dead.url.replace("/hook", "/deadhk")  # add_endpoint names it by the tail
    dead.stop()  # the port is closed: every attempt fails at once
    add_endpoint(db, events=ALL_TYPES, url=dead_url)
    add_endpoint(db, events=ALL_TYPES, url=receiver.url)
    jobs = [submit(client, token)["id"] for _ in range(5)]
    for n, job_id in enumerate(jobs):  # an event key is unique per endpoint
        queue(db, job_id, [(f"j{n}-e{i:02d}", "job.hung") for i in range(20)])
    worker = run_worker(db)  # the real schedule: the dead one's next tries are 5 s away
    try:
        wait_until(lambda: len(arrived(receiver)) == 100)
    finally:
        worker.stop()
    for n, job_id in enumerate(jobs):  # all of them, in order per job, at the live endpoint
        assert keys(receiver, job_id) == [f"j{n}-e{i:02d}" for i in range(20)]
