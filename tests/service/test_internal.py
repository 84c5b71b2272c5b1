"""Internal (driver -> API) endpoints: per-attempt auth, fencing (409, nothing written),
status moves, idempotent metric batches, checkpoints."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from svc_helpers import bearer, claim, internal, submit

from service.db.tables import Checkpoint, MetricPoint


def _points(db: Any) -> int:
    return int(
        db.read(lambda s: s.execute(select(func.count()).select_from(MetricPoint)).scalar_one())
    )


def test_attempt_token_auth(client: Any, admin_token: str, db: Any) -> None:
    a = submit(client, admin_token)["id"]
    b = submit(client, admin_token)["id"]
    na, ta = claim(db, a)
    nb, tb = claim(db, b)
    assert client.post(internal(a, na, "heartbeat"), json={}).status_code == 401
    assert (
        client.post(internal(a, na, "heartbeat"), json={}, headers=bearer("shn_nope")).status_code
        == 401
    )
    # Another job's valid token is not this job's token.
    assert client.post(internal(a, na, "heartbeat"), json={}, headers=bearer(tb)).status_code == 401
    # A user token is not an attempt token.
    assert (
        client.post(internal(a, na, "heartbeat"), json={}, headers=bearer(admin_token)).status_code
        == 401
    )
    ok = client.post(internal(a, na, "heartbeat"), json={}, headers=bearer(ta))
    assert ok.status_code == 200 and ok.json()["cancel_requested"] is False
    spec = client.get(internal(b, nb, "spec"), headers=bearer(tb)).json()
    assert spec["job_id"] == b and spec["output_dir"].endswith(b) and spec["resume_from"] is None


def test_status_moves_and_final_fields(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = bearer(t)
    assert (
        client.post(
            internal(job_id, n, "status"), json={"status": "running"}, headers=h
        ).status_code
        == 200
    )
    again = client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    assert again.status_code == 200  # idempotent
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "running" and job["started_at"] is not None
    out = client.get(internal(job_id, n, "spec"), headers=h).json()["output_dir"]
    r = client.post(
        internal(job_id, n, "status"),
        headers=h,
        json={"status": "succeeded", "final_model_uri": f"{out}/final"},  # inside: issue 10
    )
    assert r.status_code == 200
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert (job["status"], job["final_model_uri"]) == ("succeeded", f"{out}/final")
    assert job["finished_at"] is not None
    bad = client.post(internal(job_id, n, "status"), json={"status": "paused"}, headers=h)
    assert bad.status_code in (409, 422)


def test_fencing_stale_attempt_gets_409_and_writes_nothing(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n1, t1 = claim(db, job_id)
    h1 = bearer(t1)
    client.post(internal(job_id, n1, "status"), json={"status": "running"}, headers=h1)
    # The scheduler requeues it (attempt lost) and a second attempt takes over.
    from service.jobs.states import JobStatus, transition

    db.write(lambda s: transition(s, job_id=job_id, to=JobStatus.QUEUED, message="lost"))
    n2, t2 = claim(db, job_id)
    assert n2 == 2
    before = _points(db)
    point = {"points": [{"step": 1, "name": "loss", "value": 1.0}]}
    writes = [
        ("heartbeat", {}),
        ("metrics", point),
        ("checkpoints", {"step": 1, "uri": "/x", "bytes": 1, "verified": True}),
        ("status", {"status": "succeeded"}),
    ]
    for what, body in writes:
        r = client.post(internal(job_id, n1, what), json=body, headers=h1)
        assert r.status_code == 409, (what, r.text)
        assert r.json()["detail"] == "stale_attempt"
    assert client.get(internal(job_id, n1, "spec"), headers=h1).status_code == 409
    assert _points(db) == before
    assert (
        db.read(lambda s: s.execute(select(func.count()).select_from(Checkpoint)).scalar_one()) == 0
    )
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "starting" and job["attempt"] == 2
    # The current attempt writes fine.
    r = client.post(internal(job_id, n2, "metrics"), json=point, headers=bearer(t2))
    assert r.status_code == 200 and r.json()["accepted"] == 1


def test_terminal_job_fences_its_attempt(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = bearer(t)
    client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    client.post(
        internal(job_id, n, "status"),
        headers=h,
        json={"status": "failed", "error": {"type": "user_error", "message": "bad"}},
    )
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["error"] == {"type": "user_error", "message": "bad"}
    r = client.post(internal(job_id, n, "heartbeat"), json={}, headers=h)
    assert r.status_code == 409


def test_metric_batches_are_idempotent_and_skip_non_finite(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    body = {"points": [{"step": s, "name": "loss", "value": 1.0 / (s + 1)} for s in range(3)]}
    url = internal(job_id, n, "metrics")
    assert client.post(url, json=body, headers=bearer(t)).json()["accepted"] == 3
    assert client.post(url, json=body, headers=bearer(t)).json()["accepted"] == 0
    assert _points(db) == 3
    # NaN is not JSON; a diverged loss arrives as a huge float that overflows -> inf.
    raw = '{"points": [{"step": 9, "name": "loss", "value": 1e999}]}'
    r = client.post(url, content=raw, headers={**bearer(t), "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json() == {"accepted": 0, "skipped_non_finite": 1}
    assert _points(db) == 3


def test_cancelling_job_ends_cancelled_when_driver_reports(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=bearer(t))
    client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(admin_token))
    client.post(internal(job_id, n, "status"), json={"status": "succeeded"}, headers=bearer(t))
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "cancelled" and job["error"]["type"] == "cancelled"


def test_checkpoint_registration(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    url = internal(job_id, n, "checkpoints")
    ck = client.get(internal(job_id, n, "spec"), headers=bearer(t)).json()["output_dir"] + "/ck"
    body = {"step": 50, "uri": f"{ck}/50", "bytes": 123, "metrics": {"loss": 0.5}, "verified": True}
    first = client.post(url, json=body, headers=bearer(t)).json()
    again = client.post(url, json=body, headers=bearer(t)).json()
    assert first == again and first["step"] == 50 and first["verified"] is True
    client.post(url, json={**body, "step": 10, "uri": f"{ck}/10"}, headers=bearer(t))
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["latest_checkpoint"]["uri"] == f"{ck}/50"  # an older step does not replace it
    listed = client.get(f"/v1/jobs/{job_id}/checkpoints", headers=bearer(admin_token)).json()
    assert [c["step"] for c in listed["data"]] == [50, 10]
    assert set(listed["data"][0]) >= {
        "id",
        "step",
        "uri",
        "bytes",
        "metrics",
        "created_at",
        "verified",
    }
