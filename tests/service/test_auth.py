"""Auth: 401 without a valid token, 403 for a viewer's mutation, 404 for another team's job
on every job route, admin across teams, token bootstrap and revocation."""

from __future__ import annotations

import stat
from typing import Any

import pytest
from svc_helpers import bearer, submit, tiny_spec

JOB_READS = ["", "/events", "/metrics", "/checkpoints", "/logs", "/metrics/stream"]
JOB_WRITES = ["/cancel", "/resume"]


def test_admin_token_file_is_0600_and_created_once(settings: Any, app: Any) -> None:
    from service.app import create_app

    path = settings.admin_token_path
    first = path.read_text()
    assert first.startswith("shn_") and stat.S_IMODE(path.stat().st_mode) == 0o600
    create_app(settings)  # a second start keeps the existing admin token
    assert path.read_text() == first


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer shn_wrong", "Basic abc", "shn_x"])
def test_401_without_valid_token(client: Any, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    for method, path in [
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("GET", "/v1/queue"),
        ("GET", "/v1/jobs/job-x"),
        ("GET", "/v1/whoami"),
    ]:
        r = client.request(method, path, headers=headers, json=tiny_spec())
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["message"]


def test_other_teams_job_is_404_everywhere(client: Any, admin_token: str, make_token: Any) -> None:
    mine = make_token("alpha", "member")
    theirs = make_token("beta", "member")
    job_id = submit(client, mine)["id"]
    for suffix in JOB_READS:
        r = client.get(f"/v1/jobs/{job_id}{suffix}", headers=bearer(theirs))
        assert r.status_code == 404, (suffix, r.text)
        if suffix != "/metrics/stream":  # the owner's stream would not end: job is queued
            assert client.get(f"/v1/jobs/{job_id}{suffix}", headers=bearer(mine)).status_code == 200
    for suffix in JOB_WRITES:
        assert client.post(f"/v1/jobs/{job_id}{suffix}", headers=bearer(theirs)).status_code == 404
    assert client.get("/v1/jobs", headers=bearer(theirs)).json()["data"] == []
    queue = client.get("/v1/queue", headers=bearer(theirs)).json()["data"]
    # Another team's queued job is anonymous capacity only (issue 10): no id, name or team.
    assert queue and all(row["anonymous"] and row["id"] is None for row in queue)
    # Admin sees every team.
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).status_code == 200
    listed = client.get("/v1/jobs", headers=bearer(admin_token)).json()["data"]
    assert [j["id"] for j in listed] == [job_id]


def test_viewer_reads_but_cannot_mutate(client: Any, make_token: Any, admin_token: str) -> None:
    member = make_token("alpha", "member")
    viewer = make_token("alpha", "viewer")
    job_id = submit(client, member)["id"]
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(viewer)).status_code == 200
    assert client.post("/v1/jobs", json=tiny_spec(), headers=bearer(viewer)).status_code == 403
    for suffix in JOB_WRITES:
        r = client.post(f"/v1/jobs/{job_id}{suffix}", headers=bearer(viewer))
        assert r.status_code == 403, suffix
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(viewer)).json()["status"] == "queued"


def test_admin_only_endpoints(client: Any, make_token: Any) -> None:
    member = make_token("alpha", "member")
    h = bearer(member)
    assert client.post("/v1/teams", json={"name": "x"}, headers=h).status_code == 403
    assert (
        client.post(
            "/v1/tokens", json={"team": "alpha", "role": "admin", "name": "n"}, headers=h
        ).status_code
        == 403
    )
    assert client.get("/v1/tokens", headers=h).status_code == 403
    assert client.delete("/v1/tokens/tok-x", headers=h).status_code == 403
    assert [t["name"] for t in client.get("/v1/teams", headers=h).json()["data"]] == ["alpha"]


def test_teams_tokens_whoami_and_revoke(client: Any, admin_token: str) -> None:
    h = bearer(admin_token)
    r = client.post(
        "/v1/teams", json={"name": "ml", "quota": {"max_gpus": 4}, "weight": 2}, headers=h
    )
    assert r.status_code == 201 and r.json()["quota"]["max_gpus"] == 4
    assert client.post("/v1/teams", json={"name": "ml"}, headers=h).status_code == 409
    bad = client.post("/v1/teams", json={"name": "Bad Name"}, headers=h)
    assert bad.status_code == 422 and "name" in bad.json()["message"]
    r = client.post("/v1/tokens", json={"team": "ml", "role": "member", "name": "ci"}, headers=h)
    created = r.json()
    assert r.status_code == 201 and created["token"].startswith("shn_")
    assert set(created) == {"id", "token", "team", "role", "name"}
    who = client.get("/v1/whoami", headers=bearer(created["token"])).json()
    assert (who["team"], who["role"], who["name"]) == ("ml", "member", "ci")
    listed = client.get("/v1/tokens", headers=h).json()["data"]
    assert all("token" not in t and "token_hash" not in t for t in listed)
    unknown = client.post(
        "/v1/tokens", json={"team": "nope", "role": "member", "name": "x"}, headers=h
    )
    assert unknown.status_code == 422
    r = client.delete(f"/v1/tokens/{created['id']}", headers=h)
    assert r.status_code == 200 and r.json()["revoked_at"] is not None
    assert client.get("/v1/whoami", headers=bearer(created["token"])).status_code == 401
    assert client.delete("/v1/tokens/tok-missing", headers=h).status_code == 404
