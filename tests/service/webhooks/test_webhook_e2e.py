"""End to end without Ray: a real receiver on 127.0.0.1 (admin-allowed) gets each event of a
job moved through its states by the service's own API, once per ``webhook-id``, signed
(checked by hand and by the official ``openai`` client); events sent while it was down
arrive after it comes back, and after a service restart (a new app over the same database);
two senders over one database never send one id twice."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from openai import OpenAI
from sqlalchemy import select

from service.app import create_app
from service.db.engine import Database
from service.db.tables import WebhookDelivery
from service.webhooks.sender import DeliveryConfig, DeliveryWorker
from service.webhooks.ssrf import parse_allow
from tests.service.svc_helpers import bearer, claim, internal, submit
from tests.service.webhooks.receiver import Receiver

FAST_RETRIES = [0.2] * 30  # the real schedule starts at 5 s; the same code with short waits


def wait_until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def by_hand(secret: str, headers: dict[str, str], body: bytes) -> bool:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    want = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return want in headers["webhook-signature"].split(" ")


def make_app(make_settings: Callable[..., Any], launcher: Any) -> Any:
    settings = make_settings(
        webhook_allow=["127.0.0.1"], webhook_interval_s=0.05, webhook_retry_delays_s=FAST_RETRIES
    )
    return create_app(settings, launcher=launcher)


def register(client: TestClient, token: str, url: str) -> str:
    r = client.post("/v1/webhooks/endpoints", json={"url": url}, headers=bearer(token))
    assert r.status_code == 201, r.text
    return str(r.json()["secret"])


def run_job(client: TestClient, db: Any, token: str) -> str:
    """queued -> starting -> running (checkpoint at step 5) -> succeeded, via the API."""
    job_id = submit(client, token)["id"]
    n, t = claim(db, job_id)
    h = bearer(t)
    assert client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    out = client.get(internal(job_id, n, "spec"), headers=h).json()["output_dir"]
    ck = {"step": 5, "uri": f"{out}/ck/5", "bytes": 1, "metrics": {}, "verified": True}
    for _ in range(2):  # a retried checkpoint report queues no second webhook
        assert client.post(internal(job_id, n, "checkpoints"), json=ck, headers=h).is_success
    r = client.post(internal(job_id, n, "status"), json={"status": "succeeded"}, headers=h)
    assert r.status_code == 200, r.text
    return str(job_id)


def test_each_event_once_signed_and_verified(
    make_settings: Callable[..., Any], launcher: Any
) -> None:
    receiver = Receiver().start()
    try:
        with TestClient(make_app(make_settings, launcher)) as client:
            admin = client.app.state.shunter.settings.admin_token_path.read_text().strip()  # type: ignore[attr-defined]
            db = client.app.state.shunter.db  # type: ignore[attr-defined]
            client.post("/v1/teams", json={"name": "default"}, headers=bearer(admin))
            member = client.post(
                "/v1/tokens",
                json={"team": "default", "role": "member", "name": "m"},
                headers=bearer(admin),
            ).json()["token"]
            secret = register(client, member, receiver.url)
            job_id = run_job(client, db, member)
            wait_until(lambda: len(receiver.messages()) >= 2)
            time.sleep(0.5)  # nothing more comes
        got = receiver.messages()
        assert sorted(json.loads(b)["type"] for _, b in got) == ["job.checkpoint", "job.succeeded"]
        assert Counter(h["webhook-id"] for h, _ in got).most_common(1)[0][1] == 1
        openai = OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
        for headers, body in got:
            assert by_hand(secret, headers, body)
            event = openai.webhooks.unwrap(body, headers, secret=secret)
            assert event.data.id == job_id  # type: ignore[union-attr]
            payload = json.loads(body)
            assert set(payload) == {"id", "type", "created_at", "object", "data"}
            assert payload["data"]["team"] == "default" and len(body) < 1024
    finally:
        receiver.stop()


def test_down_then_up_and_restart_deliver_pending(
    make_settings: Callable[..., Any], launcher: Any
) -> None:
    receiver = Receiver().start()
    port = receiver.port
    receiver.stop()  # down from the start
    app1 = make_app(make_settings, launcher)
    with TestClient(app1) as client:
        admin = app1.state.shunter.settings.admin_token_path.read_text().strip()
        db = app1.state.shunter.db
        secret = register(client, admin, f"http://127.0.0.1:{port}/hook")
        job_a = submit(client, admin)["id"]
        client.post(f"/v1/jobs/{job_a}/cancel", headers=bearer(admin))

        def attempted(job_id: str) -> Callable[[], bool]:
            def _check() -> bool:
                q = select(WebhookDelivery).where(WebhookDelivery.job_id == job_id)
                rows = db.read(lambda s: s.execute(q).scalars().all())
                return bool(rows) and all(r.attempts >= 2 and r.status == "pending" for r in rows)

            return _check

        wait_until(attempted(job_a))  # retried while down, still pending
        receiver = Receiver(port=port).start()  # back up
        wait_until(lambda: len(receiver.messages()) == 1)
        receiver.stop()  # down again; the next event waits for the restart
        job_b = submit(client, admin)["id"]
        client.post(f"/v1/jobs/{job_b}/cancel", headers=bearer(admin))
        wait_until(attempted(job_b))
    # The service is gone; a new app over the same database sends what is pending.
    receiver = Receiver(port=port).start()
    try:
        with TestClient(make_app(make_settings, launcher)) as client:
            wait_until(lambda: len(receiver.messages()) == 1)
            time.sleep(0.5)
            page = client.get("/v1/webhooks/deliveries", headers=bearer(admin)).json()["data"]
        assert [d["status"] for d in page] == ["delivered", "delivered"]
        got = receiver.messages()
        assert len(got) == 1 and all(by_hand(secret, h, b) for h, b in got)
        assert [json.loads(b)["data"]["id"] for _, b in got] == [job_b]  # job_a's came earlier
    finally:
        receiver.stop()


def test_two_senders_never_send_one_id_twice(
    make_settings: Callable[..., Any], launcher: Any, db_url: str
) -> None:
    receiver = Receiver().start()
    second = Database(db_url)
    other = DeliveryWorker(
        db=second,
        config=DeliveryConfig(allow=parse_allow(["127.0.0.1"]), retry_delays_s=(0.2,) * 30),
        interval_s=0.01,
    )
    try:
        app = make_app(make_settings, launcher)
        with TestClient(app) as client:
            admin = app.state.shunter.settings.admin_token_path.read_text().strip()
            register(client, admin, receiver.url)
            other.start()
            jobs = [submit(client, admin)["id"] for _ in range(12)]
            for job_id in jobs:
                client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(admin))
            wait_until(lambda: len(receiver.messages()) >= 12)
            time.sleep(0.5)
        ids = Counter(h["webhook-id"] for h, _ in receiver.messages())
        assert len(ids) == 12 and set(ids.values()) == {1}
    finally:
        other.stop()
        second.dispose()
        receiver.stop()


def test_commit_wakes_the_sender_without_waiting_for_a_poll(
    make_settings: Callable[..., Any], launcher: Any
) -> None:
    receiver = Receiver().start()
    settings = make_settings(webhook_allow=["127.0.0.1"], webhook_interval_s=60.0)
    try:
        with TestClient(create_app(settings, launcher=launcher)) as client:
            admin = settings.admin_token_path.read_text().strip()
            register(client, admin, receiver.url)
            time.sleep(0.5)  # the sender's first pass is over: it now waits up to 60 s
            job_id = submit(client, admin)["id"]
            client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(admin))
            start = time.monotonic()
            wait_until(lambda: len(receiver.messages()) == 1, timeout=10.0)
            assert time.monotonic() - start < 10.0
    finally:
        receiver.stop()
