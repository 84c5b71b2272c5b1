"""The public job endpoints end to end through the app (in-memory launcher, no scheduler)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from svc_helpers import bearer, claim, internal, submit, tiny_spec

from service.db.tables import Event, Job
from service.launch import LaunchState, LaunchStatus


def test_submit_returns_queued_job_with_resolved_spec(
    client: Any, admin_token: str, settings: Any, data_root: Any
) -> None:
    r = client.post("/v1/jobs", json=tiny_spec("first"), headers=bearer(admin_token))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["id"].startswith("job-") and job["status"] == "queued"
    assert job["team"] == "default" and job["name"] == "first" and job["attempt"] == 0
    assert job["queue_position"] == 1 and job["pending_reason"]
    spec = job["spec"]
    assert spec["training"]["output_dir"] == f"{settings.storage}/{job['id']}"
    assert spec["data"]["train"]["path"] == str(data_root / "train.tsv")  # resolved
    assert spec["training"]["learning_rate"] == 5e-5  # defaults filled
    assert job["created_at"].endswith("Z")
    for key in ("started_at", "finished_at", "error", "latest_checkpoint", "final_model_uri"):
        assert job[key] is None
    got = client.get(f"/v1/jobs/{job['id']}", headers=bearer(admin_token)).json()
    assert got["spec"] == spec


def test_submit_yaml(client: Any, admin_token: str) -> None:
    import yaml

    body = yaml.safe_dump(tiny_spec("from-yaml"))
    r = client.post(
        "/v1/jobs",
        content=body,
        headers={**bearer(admin_token), "Content-Type": "application/yaml"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "from-yaml"


def _count(db: Any, model: Any) -> int:
    return int(db.read(lambda s: s.execute(select(func.count()).select_from(model)).scalar_one()))


@pytest.mark.parametrize(
    ("mutate", "loc"),
    [
        (lambda s: s["training"].update(learning_rat=1), "training.learning_rat"),
        (lambda s: s["training"].update(output_dir="/tmp/x"), "training.output_dir"),
        (lambda s: s["data"]["train"].update(path="/etc/passwd"), "data.train.path"),
        (lambda s: s["resources"].update(num_workers=64), "resources"),
    ],
)
def test_invalid_spec_422_names_field_and_writes_nothing(
    client: Any, admin_token: str, db: Any, mutate: Any, loc: str
) -> None:
    spec = tiny_spec()
    mutate(spec)
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    body = r.json()
    assert loc in body["message"] or any(d["loc"] == loc for d in body["detail"])
    assert _count(db, Job) == 0 and _count(db, Event) == 0


def test_team_quota_that_can_never_fit_is_422(
    client: Any, admin_token: str, make_token: Any
) -> None:
    r = client.post(
        "/v1/teams", json={"name": "small", "quota": {"max_cpus": 1}}, headers=bearer(admin_token)
    )
    assert r.status_code == 201, r.text
    member = make_token("small", "member")
    spec = tiny_spec()
    spec["resources"]["num_workers"] = 2
    r = client.post("/v1/jobs", json=spec, headers=bearer(member))
    assert r.status_code == 422 and "quota" in r.json()["message"]


def test_list_filters_and_cursor_pagination(client: Any, admin_token: str) -> None:
    ids = [submit(client, admin_token, tiny_spec(f"j{i % 2}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/v1/jobs", params=params, headers=bearer(admin_token)).json()
        seen += [j["id"] for j in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))  # newest first, each exactly once
    named = client.get("/v1/jobs", params={"name": "j1"}, headers=bearer(admin_token)).json()
    assert {j["name"] for j in named["data"]} == {"j1"} and len(named["data"]) == 2
    client.post(f"/v1/jobs/{ids[0]}/cancel", headers=bearer(admin_token))
    cancelled = client.get(
        "/v1/jobs", params={"status": "cancelled"}, headers=bearer(admin_token)
    ).json()
    assert [j["id"] for j in cancelled["data"]] == [ids[0]]
    bad = client.get("/v1/jobs", params={"cursor": "not-a-cursor"}, headers=bearer(admin_token))
    assert bad.status_code == 400


def test_cancel_queued_running_and_finished(
    client: Any, admin_token: str, db: Any, launcher: Any
) -> None:
    queued = submit(client, admin_token)["id"]
    r = client.post(f"/v1/jobs/{queued}/cancel", headers=bearer(admin_token))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert r.json()["error"]["type"] == "cancelled"
    again = client.post(f"/v1/jobs/{queued}/cancel", headers=bearer(admin_token))
    assert again.status_code == 200 and again.json()["status"] == "cancelled"

    running = submit(client, admin_token)["id"]
    number, token = claim(db, running)
    launcher.states[f"{running}-{number}"] = LaunchStatus(state=LaunchState.RUNNING)
    client.post(
        internal(running, number, "status"), json={"status": "running"}, headers=bearer(token)
    )
    r = client.post(f"/v1/jobs/{running}/cancel", headers=bearer(admin_token))
    assert r.json()["status"] == "cancelling" and r.json()["cancel_requested"] is True
    assert launcher.status(f"{running}-{number}").state == LaunchState.STOPPED
    hb = client.post(internal(running, number, "heartbeat"), json={}, headers=bearer(token))
    assert hb.json()["cancel_requested"] is True
    assert (
        client.post(f"/v1/jobs/{running}/cancel", headers=bearer(admin_token)).json()["status"]
        == "cancelling"
    )

    done = submit(client, admin_token)["id"]
    number, token = claim(db, done)
    for status in ("running", "succeeded"):
        client.post(
            internal(done, number, "status"), json={"status": status}, headers=bearer(token)
        )
    r = client.post(f"/v1/jobs/{done}/cancel", headers=bearer(admin_token))
    assert r.status_code == 409 and "succeeded" in r.json()["message"]


def test_resume_failed_job_from_newest_verified_checkpoint(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    assert client.post(f"/v1/jobs/{job_id}/resume", headers=bearer(admin_token)).status_code == 409
    number, token = claim(db, job_id)
    h = bearer(token)
    client.post(internal(job_id, number, "status"), json={"status": "running"}, headers=h)
    out = client.get(internal(job_id, number, "spec"), headers=h).json()["output_dir"]
    for step, verified in ((10, True), (20, True), (30, False)):
        r = client.post(
            internal(job_id, number, "checkpoints"),
            headers=h,
            json={"step": step, "uri": f"{out}/ck/{step}", "bytes": 1, "verified": verified},
        )
        assert r.status_code == 200, r.text
    client.post(
        internal(job_id, number, "status"),
        headers=h,
        json={"status": "failed", "error": {"type": "oom", "message": "boom"}},
    )
    r = client.post(f"/v1/jobs/{job_id}/resume", headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["status"] == "queued" and job["resume_from"] == f"{out}/ck/20"
    assert job["error"] is None and job["finished_at"] is None
    number2, token2 = claim(db, job_id)
    assert number2 == 2
    spec = client.get(internal(job_id, number2, "spec"), headers=bearer(token2)).json()
    assert spec["resume_from"] == f"{out}/ck/20" and spec["attempt"] == 2
    types = [
        e["type"]
        for e in client.get(f"/v1/jobs/{job_id}/events", headers=bearer(admin_token)).json()["data"]
    ]
    assert types == ["submitted", "claimed", "running", "failed", "resumed", "claimed"]


def test_events_metrics_checkpoints_pagination(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    number, token = claim(db, job_id)
    points = [{"step": i, "name": n, "value": float(i)} for i in range(5) for n in ("loss", "lr")]
    r = client.post(
        internal(job_id, number, "metrics"),
        headers=bearer(token),
        json={"points": points, "progress": {"step": 4, "total_steps": 20, "epoch": 0.1}},
    )
    assert r.json()["accepted"] == 10
    h = bearer(admin_token)
    got: list[Any] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, "name": "loss"}
        if cursor:
            params["cursor"] = cursor
        page = client.get(f"/v1/jobs/{job_id}/metrics", params=params, headers=h).json()
        got += page["data"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert [(p["step"], p["name"]) for p in got] == [(i, "loss") for i in range(5)]
    after = client.get(
        f"/v1/jobs/{job_id}/metrics", params={"after": got[2]["id"]}, headers=h
    ).json()["data"]
    assert all(p["id"] > got[2]["id"] for p in after) and len(after) == 10 - 5
    job = client.get(f"/v1/jobs/{job_id}", headers=h).json()
    assert job["progress"] == {"step": 4, "total_steps": 20, "epoch": 0.1}
    assert job["latest_metrics"]["loss"] == 4.0
    events = client.get(f"/v1/jobs/{job_id}/events", params={"limit": 1}, headers=h).json()
    assert len(events["data"]) == 1 and events["next_cursor"]
    rest = client.get(
        f"/v1/jobs/{job_id}/events", params={"cursor": events["next_cursor"]}, headers=h
    ).json()
    assert [e["type"] for e in rest["data"]] == ["claimed"]
    assert client.get(f"/v1/jobs/{job_id}/checkpoints", headers=h).json() == {
        "data": [],
        "next_cursor": None,
    }


def test_logs_queue_cluster_health_metrics_docs(
    client: Any, admin_token: str, db: Any, launcher: Any
) -> None:
    h = bearer(admin_token)
    first = submit(client, admin_token)["id"]
    none = client.get(f"/v1/jobs/{first}/logs", headers=h).json()
    assert (none["text"], none["submission_id"], none["source"]) == ("", None, "none")
    number, _ = claim(db, first)
    # Nothing in the durable store yet: the tail falls back to the launcher's live log.
    launcher.log_text[f"{first}-{number}"] = "a\nb\nc\n"
    live = client.get(f"/v1/jobs/{first}/logs", params={"tail": 3}, headers=h).json()
    assert (live["text"], live["source"]) == ("b\nc", "launcher")
    low = submit(client, admin_token, {**tiny_spec("low"), "priority": "low"})["id"]
    high = submit(client, admin_token, {**tiny_spec("high"), "priority": "high"})["id"]
    q = client.get("/v1/queue", headers=h).json()["data"]
    assert [(x["id"], x["position"]) for x in q] == [(high, 1), (low, 2)]
    assert client.get(f"/v1/jobs/{low}", headers=h).json()["queue_position"] == 2
    cluster = client.get("/v1/cluster", headers=h).json()
    assert cluster["total_cpus"] == 8 and cluster["nodes"][0]["node_id"] == "local"
    assert client.get("/healthz").json() == {"status": "ok"}
    text = client.get("/metrics").text
    assert 'shunter_jobs{status="queued"} 2.0' in text
    assert "shunter_http_request_seconds_bucket" in text
    assert client.get("/openapi.json").json()["info"]["title"] == "Shunter"
    assert client.get("/docs").status_code == 200
