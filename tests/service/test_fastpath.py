"""The ``GET /v1/jobs/{id}`` fast path (``service.api.fastpath``): same bytes as the routed
route, never stale after any write, and auth/tenancy exactly as before."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

import service.jobs
from service.db.models import Job
from tests.service.svc_helpers import bearer, claim, submit


def _routed_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the routed route fail, so a 200 proves the fast path answered."""

    def boom(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("routed GET /v1/jobs/{id} was called")

    monkeypatch.setattr(service.jobs, "get_job", boom)


def test_fast_path_serves_routed_bytes_and_follows_every_write(
    client: Any, db: Any, make_token: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = make_token("alpha", "member")
    job_id = submit(client, token)["id"]
    claim(db, job_id)  # running: not queued, so the fast path may serve it
    url = f"/v1/jobs/{job_id}"
    # The query string sends the request down the routed path (the reference bytes).
    routed = client.get(url + "?via=router", headers=bearer(token))
    assert routed.status_code == 200 and routed.json()["status"] == "starting"
    if db.is_sqlite:  # the fast path serves SQLite; PostgreSQL keeps the routed path
        _routed_unavailable(monkeypatch)
    for _ in range(2):  # a miss (built from the row), then a hit (cached bytes)
        fast = client.get(url, headers=bearer(token))
        assert fast.status_code == 200
        assert fast.content == routed.content
        assert fast.headers["content-type"] == "application/json"
    # A write that touches neither status nor updated_at is still seen at once.
    db.write(lambda s: s.execute(update(Job).where(Job.id == job_id).values(progress_step=7)))
    after = client.get(url, headers=bearer(token))
    assert after.status_code == 200 and after.json()["progress"]["step"] == 7
    monkeypatch.undo()
    assert after.content == client.get(url + "?via=router", headers=bearer(token)).content


def test_fast_path_keeps_tenancy_revocation_and_queue_position(
    client: Any, db: Any, make_token: Any, admin_token: str
) -> None:
    alpha = make_token("alpha", "member")
    beta = make_token("beta", "member")
    queued_id = submit(client, alpha)["id"]
    running_id = submit(client, alpha)["id"]
    claim(db, running_id)
    for token in (alpha, beta):  # both tokens cached by earlier calls
        assert client.get("/v1/whoami", headers=bearer(token)).status_code == 200
    assert client.get(f"/v1/jobs/{running_id}", headers=bearer(alpha)).status_code == 200
    other = client.get(f"/v1/jobs/{running_id}", headers=bearer(beta))
    assert other.status_code == 404 and other.json()["detail"] == "not_found"
    missing = client.get("/v1/jobs/job-nope", headers=bearer(alpha))
    assert missing.status_code == 404
    assert client.get(f"/v1/jobs/{running_id}").status_code == 401
    queued = client.get(f"/v1/jobs/{queued_id}", headers=bearer(alpha)).json()
    assert queued["status"] == "queued" and queued["queue_position"] >= 1
    # Revoking in this process takes effect on the very next request.
    listed = client.get("/v1/tokens", headers=bearer(admin_token)).json()["data"]
    alpha_id = next(t["id"] for t in listed if t["name"] == "alpha-member")
    assert client.delete(f"/v1/tokens/{alpha_id}", headers=bearer(admin_token)).status_code == 200
    assert client.get(f"/v1/jobs/{running_id}", headers=bearer(alpha)).status_code == 401
