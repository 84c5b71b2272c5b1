"""PATCH /v1/teams/{name}, max_priority at submit (403), and GET /v1/teams/{name}/usage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update

from service.db.tables import Attempt, Team
from tests.service.svc_helpers import bearer, claim, tiny_spec


def test_patch_team_changes_weight_quota_and_max_priority(
    client: Any, admin_token: str, make_token: Any
) -> None:
    make_token("ml", "member")
    h = bearer(admin_token)
    body = {"weight": 3, "quota": {"max_gpus": 8, "max_running_jobs": 2}, "max_priority": "high"}
    r = client.patch("/v1/teams/ml", json=body, headers=h)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["weight"] == 3 and got["max_priority"] == "high"
    assert got["quota"] == {
        "max_gpus": 8,
        "max_cpus": None,
        "max_running_jobs": 2,
        "max_gpus_by_type": None,
    }
    # A field left out is kept; a null clears it (unlimited).
    r = client.patch("/v1/teams/ml", json={"quota": {"max_gpus": None}}, headers=h)
    assert r.json()["quota"] == {
        "max_gpus": None,
        "max_cpus": None,
        "max_running_jobs": 2,
        "max_gpus_by_type": None,
    }
    listed = client.get("/v1/teams", headers=h).json()["data"]
    assert {t["name"]: t["weight"] for t in listed}["ml"] == 3


def test_patch_team_errors(client: Any, admin_token: str, make_token: Any) -> None:
    member = make_token("ml", "member")
    assert (
        client.patch("/v1/teams/ml", json={"weight": 2}, headers=bearer(member)).status_code == 403
    )
    h = bearer(admin_token)
    assert client.patch("/v1/teams/nope", json={"weight": 2}, headers=h).status_code == 404
    bad = client.patch("/v1/teams/ml", json={"max_priority": "urgent"}, headers=h)
    assert bad.status_code == 422 and "max_priority" in bad.json()["message"]
    bad = client.patch("/v1/teams/ml", json={"weight": 0}, headers=h)
    assert bad.status_code == 422 and "weight" in bad.json()["message"]


def test_member_above_max_priority_gets_403_naming_the_limit(
    client: Any, admin_token: str, make_token: Any
) -> None:
    member = make_token("ml", "member")
    high = {**tiny_spec(), "priority": "high"}
    r = client.post("/v1/jobs", json=high, headers=bearer(member))
    assert r.status_code == 403, r.text
    assert "max_priority 'normal'" in r.json()["message"] and "'high'" in r.json()["message"]
    assert client.get("/v1/jobs", headers=bearer(member)).json()["data"] == []  # nothing written
    # normal and low are within the default limit; admins may submit high anywhere.
    assert client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member)).status_code == 201
    assert client.post("/v1/jobs", json=high, headers=bearer(admin_token)).status_code == 201
    client.patch("/v1/teams/ml", json={"max_priority": "high"}, headers=bearer(admin_token))
    assert client.post("/v1/jobs", json=high, headers=bearer(member)).status_code == 201
    client.patch("/v1/teams/ml", json={"max_priority": "low"}, headers=bearer(admin_token))
    r = client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member))
    assert r.status_code == 403 and "max_priority 'low'" in r.json()["message"]


def test_new_teams_default_to_normal_and_the_admin_team_to_high(
    client: Any, admin_token: str, make_token: Any
) -> None:
    make_token("ml", "member")
    teams = client.get("/v1/teams", headers=bearer(admin_token)).json()["data"]
    assert {t["name"]: t["max_priority"] for t in teams} == {"default": "high", "ml": "normal"}


def test_usage_counts_gpu_and_cpu_seconds_of_attempts(
    client: Any, admin_token: str, make_token: Any, db: Any
) -> None:
    member = make_token("ml", "member")
    other = make_token("other", "member")
    spec = tiny_spec()
    spec["resources"] = {"num_workers": 2, "gpus_per_worker": 0, "cpus_per_worker": 1.5}
    job_id = client.post("/v1/jobs", json=spec, headers=bearer(member)).json()["id"]
    number, _ = claim(db, job_id)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    db.write(
        lambda s: s.execute(
            update(Attempt)
            .where(Attempt.job_id == job_id, Attempt.number == number)
            .values(started_at=t0, ended_at=t0 + timedelta(seconds=100), status="failed")
        )
    )
    r = client.get("/v1/teams/ml/usage", headers=bearer(member))
    assert r.status_code == 200, r.text
    assert r.json()["cpu_seconds"] == 300.0 and r.json()["gpu_seconds"] == 0
    assert r.json()["owed_share_seconds"] == 0.0  # no scheduler tick has contended yet
    db.write(lambda s: s.get(Team, "ml").__setattr__("owed_s", 1800.0))
    r = client.get("/v1/teams/ml/usage", headers=bearer(member))
    assert r.json()["owed_share_seconds"] == 1800.0
    # since= clips the interval: 40 of the 100 seconds are after t0 + 60 s.
    since = (t0 + timedelta(seconds=60)).isoformat()
    r = client.get("/v1/teams/ml/usage", params={"since": since}, headers=bearer(member))
    assert r.json()["cpu_seconds"] == 120.0 and r.json()["attempts"] == 1
    assert client.get("/v1/teams/ml/usage", headers=bearer(other)).status_code == 404
    assert client.get("/v1/teams/ml/usage", headers=bearer(admin_token)).status_code == 200


def test_dashboard_has_a_cluster_view(client: Any) -> None:
    assert 'href="#/cluster"' in client.get("/").text
    js = client.get("/js/cluster.js")
    assert js.status_code == 200 and "export function clusterView" in js.text
    assert "/usage" in js.text and "estimated_start_at" in js.text
