"""One delivery attempt against a real receiver: 2xx delivered; 410 disables the endpoint at
once; failures retry on the schedule, then disable the endpoint after enough of them over a
span (shown in the API read); a redirect is not followed; an endless answer is cut at the
time bound; a name that now resolves to a private address (DNS rebinding) is not called."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from service.db.tables import WebhookDelivery, WebhookEndpoint, utcnow_py
from service.webhooks.endpoints import endpoint_read
from service.webhooks.events import WebhookEvent
from service.webhooks.outbox import enqueue
from service.webhooks.sender import DeliveryConfig, deliver_due
from service.webhooks.ssrf import parse_allow
from tests.service.svc_helpers import submit
from tests.service.webhooks.receiver import Receiver
from tests.service.webhooks.test_webhook_outbox import add_endpoint

ALLOW = parse_allow(["127.0.0.1"])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=False, trust_env=False) as c:
        yield c


def queue_one(client: Any, db: Any, token: str, url: str, key: str = "e1") -> str:
    """An endpoint for ``url`` and one queued delivery; returns the endpoint id."""
    ep = add_endpoint(db, events=["job.failed"], url=url)
    job = submit(client, token)
    db.write(
        lambda s: enqueue(
            s.connection(),
            job_id=job["id"],
            webhook=WebhookEvent(type_="job.failed", event_key=key, created_at=utcnow_py()),
        )
    )
    return ep


def row(db: Any) -> WebhookDelivery:
    return db.read(lambda s: s.execute(select(WebhookDelivery)).scalars().one())


def endpoint(db: Any, ep: str) -> Any:
    return db.read(lambda s: endpoint_read(s.get(WebhookEndpoint, ep)))


def make_due(db: Any) -> None:
    # A second back: SQLite's clock in the due query has millisecond resolution, so "now" by
    # Python's clock (microseconds) may still lie ahead of it within the same millisecond.
    due = utcnow_py() - timedelta(seconds=1)
    db.write(lambda s: s.execute(update(WebhookDelivery).values(next_attempt_at=due)))


def test_delivered_on_2xx(
    client: Any, db: Any, make_token: Any, receiver: Receiver, http: Any
) -> None:
    queue_one(client, db, make_token("default"), receiver.url)
    assert deliver_due(db, config=DeliveryConfig(allow=ALLOW), client=http) == 1
    r = row(db)
    assert (r.status, r.attempts, r.last_status_code) == ("delivered", 1, 200)
    assert deliver_due(db, config=DeliveryConfig(allow=ALLOW), client=http) == 0  # not again
    assert len(receiver.messages()) == 1


def test_410_disables_at_once(
    client: Any, db: Any, make_token: Any, receiver: Receiver, http: Any
) -> None:
    receiver.status = 410
    ep = queue_one(client, db, make_token("default"), receiver.url)
    deliver_due(db, config=DeliveryConfig(allow=ALLOW), client=http)
    assert row(db).status == "failed"
    read = endpoint(db, ep)
    assert read.enabled is False and "410" in read.disabled_reason


def test_failures_retry_then_disable_after_count_and_span(
    client: Any, db: Any, make_token: Any, receiver: Receiver, http: Any
) -> None:
    receiver.status = 500
    ep = queue_one(client, db, make_token("default"), receiver.url)
    config = DeliveryConfig(allow=ALLOW, disable_after_failures=3, disable_after_s=0.0)
    deliver_due(db, config=config, client=http)
    r = row(db)
    assert (r.status, r.attempts, r.last_status_code) == ("pending", 1, 500)
    assert deliver_due(db, config=config, client=http) == 0  # the next try is 5 s away
    for _ in range(2):
        make_due(db)
        deliver_due(db, config=config, client=http)
    read = endpoint(db, ep)
    assert read.enabled is False and read.failures == 3 and "3 consecutive" in read.disabled_reason
    make_due(db)
    assert deliver_due(db, config=config, client=http) == 0  # nothing goes to a disabled one
    assert row(db).status == "pending"  # it waits for `enable`


def test_redirect_not_followed(
    client: Any, db: Any, make_token: Any, receiver: Receiver, http: Any
) -> None:
    receiver.status = 302
    queue_one(client, db, make_token("default"), receiver.url)
    deliver_due(db, config=DeliveryConfig(allow=ALLOW), client=http)
    assert (row(db).status, row(db).last_status_code) == ("pending", 302)
    assert len(receiver.messages()) == 1  # /elsewhere was never asked


def test_endless_answer_cut_at_time_bound(
    client: Any, db: Any, make_token: Any, receiver: Receiver, http: Any
) -> None:
    receiver.drip = True
    queue_one(client, db, make_token("default"), receiver.url)
    start = time.monotonic()
    deliver_due(db, config=DeliveryConfig(allow=ALLOW, timeout_s=1.0), client=http)
    assert time.monotonic() - start < 5.0
    assert (row(db).status, row(db).last_status_code) == ("delivered", 200)


def test_rebinding_to_private_address_not_called(
    client: Any, db: Any, make_token: Any, receiver: Receiver, http: Any
) -> None:
    url = f"http://hooks.example.test:{receiver.port}/hook"
    queue_one(client, db, make_token("default"), url)
    rebound = DeliveryConfig(resolve=lambda host, port: ["10.0.0.7"])  # no allow-list
    deliver_due(db, config=rebound, client=http)
    r = row(db)
    assert r.status == "pending" and "refused" in (r.last_error or "")
    assert receiver.messages() == []
    # Allowed, the sender connects to the address it checked, naming the host in Host.
    make_due(db)
    pinned = DeliveryConfig(allow=ALLOW, resolve=lambda host, port: ["127.0.0.1"])
    deliver_due(db, config=pinned, client=http)
    assert row(db).status == "delivered"
    assert receiver.messages()[0][0]["host"] == f"hooks.example.test:{receiver.port}"


def test_prune_deletes_only_old_finished_rows(
    client: Any, db: Any, make_token: Any, receiver: Receiver, http: Any
) -> None:
    from datetime import UTC, datetime

    from service.webhooks.sender import prune

    token = make_token("default")
    queue_one(client, db, token, receiver.url)
    deliver_due(db, config=DeliveryConfig(allow=ALLOW), client=http)  # delivered
    old = datetime(2020, 1, 1, tzinfo=UTC)
    db.write(lambda s: s.execute(update(WebhookDelivery).values(created_at=old)))
    assert db.write(lambda s: prune(s, keep_s=10 * 365 * 86400.0)) == 0  # not old enough
    db.write(lambda s: s.execute(update(WebhookDelivery).values(status="pending")))
    assert db.write(lambda s: prune(s, keep_s=86400.0)) == 0  # pending rows stay
    db.write(lambda s: s.execute(update(WebhookDelivery).values(status="delivered")))
    assert db.write(lambda s: prune(s, keep_s=86400.0)) == 1
    assert db.read(lambda s: s.execute(select(WebhookDelivery)).scalars().all()) == []


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
@pytest.mark.parametrize(("cert_name", "ok"), [("hooks.example.test", True), ("other.test", False)])
def test_https_to_the_checked_address_verifies_the_url_host(
    client: Any, db: Any, make_token: Any, tmp_path: Path, cert_name: str, ok: bool
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", f"/CN={cert_name}", "-addext", f"subjectAltName=DNS:{cert_name}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    receiver = Receiver(tls=server_ctx).start()
    try:
        queue_one(
            client, db, make_token("default"), f"https://hooks.example.test:{receiver.port}/h"
        )
        config = DeliveryConfig(allow=ALLOW, resolve=lambda host, port: ["127.0.0.1"])
        trust = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(verify=trust, follow_redirects=False, trust_env=False) as tls_client:
            deliver_due(db, config=config, client=tls_client)
        r = row(db)
        if ok:  # SNI and the certificate check used the URL's host, not the address
            assert r.status == "delivered", r.last_error
            assert receiver.messages()[0][0]["host"] == f"hooks.example.test:{receiver.port}"
        else:
            assert r.status == "pending" and "CERTIFICATE_VERIFY_FAILED" in (r.last_error or "")
            assert receiver.messages() == []
    finally:
        receiver.stop()
