"""``/v1/webhooks`` and ``notify:``: registration behind the SSRF guard (422 naming the
field unless allowed), the secret shown once, rotation, team isolation, the job spec's
``notify:`` checked against the team's endpoints, deliveries listed and re-sent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.jobs.states import JobStatus, transition
from tests.service.svc_helpers import bearer, submit, tiny_spec

RECEIVER = "http://127.0.0.1:9/hook"


@pytest.fixture
def client(make_settings: Callable[..., Any], launcher: Any) -> Iterator[TestClient]:
    from service.app import create_app

    settings = make_settings(webhook_allow=["127.0.0.1"], deliver_webhooks=False)
    with TestClient(create_app(settings, launcher=launcher)) as c:
        yield c


@pytest.fixture
def db(client: TestClient) -> Any:
    return client.app.state.shunter.db  # type: ignore[attr-defined]


@pytest.fixture
def admin_token(client: TestClient) -> str:
    settings = client.app.state.shunter.settings  # type: ignore[attr-defined]
    return str(settings.admin_token_path.read_text().strip())


def create(client: TestClient, token: str, url: str = RECEIVER, **body: Any) -> Any:
    return client.post("/v1/webhooks/endpoints", json={"url": url, **body}, headers=bearer(token))


def test_private_url_refused_with_422_naming_url(client: TestClient, make_token: Any) -> None:
    token = make_token("default")
    r = create(client, token, "http://10.0.0.5/hook")
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == "url"
    assert "SHUNTER_WEBHOOK_ALLOW" in r.json()["message"]
    r = create(client, token, "ftp://example.com/")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "url"


def test_create_shows_secret_once_then_rotate(client: TestClient, make_token: Any) -> None:
    token = make_token("default")
    r = create(client, token, events=["job.failed", "job.succeeded"])
    assert r.status_code == 201, r.text
    ep = r.json()
    assert ep["secret"].startswith("whsec_") and ep["enabled"] is True
    assert ep["events"] == ["job.failed", "job.succeeded"]
    listed = client.get("/v1/webhooks/endpoints", headers=bearer(token)).json()["data"]
    assert [e["id"] for e in listed] == [ep["id"]] and "secret" not in listed[0]
    assert create(client, token).status_code == 409  # one endpoint per URL per team
    r = client.post(f"/v1/webhooks/endpoints/{ep['id']}/rotate-secret", headers=bearer(token))
    assert r.status_code == 200, r.text
    assert r.json()["secret"] != ep["secret"] and r.json()["previous_secret_valid_until"]
    got = client.get(f"/v1/webhooks/endpoints/{ep['id']}", headers=bearer(token)).json()
    assert got["previous_secret_valid_until"] is not None


def test_other_team_and_viewer(client: TestClient, make_token: Any) -> None:
    ep = create(client, make_token("default")).json()
    other = make_token("other")
    assert (
        client.get(f"/v1/webhooks/endpoints/{ep['id']}", headers=bearer(other)).status_code == 404
    )
    assert client.get("/v1/webhooks/endpoints", headers=bearer(other)).json()["data"] == []
    assert create(client, other, team="default").status_code == 403
    viewer = make_token("default", "viewer")
    assert create(client, viewer, "http://127.0.0.1:9/v").status_code == 403
    assert (
        client.delete(f"/v1/webhooks/endpoints/{ep['id']}", headers=bearer(other)).status_code
        == 404
    )


def test_notify_must_name_a_team_endpoint(client: TestClient, make_token: Any) -> None:
    token = make_token("default")
    spec = {**tiny_spec(), "notify": [{"url": RECEIVER, "events": ["job.failed"]}]}
    r = client.post("/v1/jobs", json=spec, headers=bearer(token))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == "notify.0.url"
    assert "shunter webhooks create" in r.json()["message"]
    bad = {**tiny_spec(), "notify": [{"url": "gopher://x/"}]}
    r = client.post("/v1/jobs", json=bad, headers=bearer(token))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "notify.0.url"
    create(client, token, events=[])
    job = submit(client, token, spec)
    assert job["spec"]["notify"] == [{"url": RECEIVER, "events": ["job.failed"]}]


def test_deliveries_listed_and_resent(client: TestClient, db: Any, make_token: Any) -> None:
    token = make_token("default")
    ep = create(client, token, events=["job.cancelled"]).json()
    job = submit(client, token)
    db.write(lambda s: transition(s, job_id=job["id"], to=JobStatus.CANCELLED))
    page = client.get("/v1/webhooks/deliveries", headers=bearer(token)).json()
    assert [(d["type"], d["status"], d["job_id"]) for d in page["data"]] == [
        ("job.cancelled", "pending", job["id"])
    ]
    msg = page["data"][0]["id"]
    assert (
        client.get(
            f"/v1/webhooks/deliveries?job={job['id']}&status=delivered", headers=bearer(token)
        ).json()["data"]
        == []
    )
    other = make_token("other")
    assert client.get("/v1/webhooks/deliveries", headers=bearer(other)).json()["data"] == []
    r = client.post(f"/v1/webhooks/deliveries/{msg}/resend", headers=bearer(other))
    assert r.status_code == 404
    r = client.patch(
        f"/v1/webhooks/endpoints/{ep['id']}", json={"enabled": False}, headers=bearer(token)
    )
    assert r.json()["enabled"] is False
    assert (
        client.post(f"/v1/webhooks/deliveries/{msg}/resend", headers=bearer(token)).status_code
        == 409
    )
    client.patch(
        f"/v1/webhooks/endpoints/{ep['id']}", json={"enabled": True}, headers=bearer(token)
    )
    r = client.post(f"/v1/webhooks/deliveries/{msg}/resend", headers=bearer(token))
    assert r.status_code == 200 and r.json()["id"] == msg and r.json()["status"] == "pending"


def test_metrics_count_deliveries_and_endpoints(
    client: TestClient, db: Any, make_token: Any
) -> None:
    token = make_token("default")
    ep = create(client, token, events=["job.cancelled"]).json()
    job = submit(client, token)
    db.write(lambda s: transition(s, job_id=job["id"], to=JobStatus.CANCELLED))
    client.patch(
        f"/v1/webhooks/endpoints/{ep['id']}", json={"enabled": False}, headers=bearer(token)
    )
    text = client.get("/metrics").text
    assert 'shunter_webhook_deliveries{status="pending"} 1.0' in text
    assert 'shunter_webhook_deliveries{status="delivered"} 0.0' in text
    assert 'shunter_webhook_endpoints{state="disabled"} 1.0' in text
