"""A driver that reports ``storage_unavailable`` (the object store stayed away past
``SHUNTER_STORAGE_RETRY_S``: issue 32, item 2) does not fail its job: the attempt is lost (an
infra retry, named in its event) and the job is queued again from its newest verified
checkpoint, so nothing verified is lost. Past ``max_infra_retries`` it fails as
``retries_exhausted``, naming the outage. Any other error still fails the job at once."""

from __future__ import annotations

from typing import Any

from service.db.tables import Attempt, Event, Job
from tests.service.svc_helpers import bearer, claim, internal, submit

OUTAGE = {"type": "storage_unavailable", "message": "object storage unavailable: listing ..."}


def _run_to_checkpoint(client: Any, db: Any, job_id: str) -> tuple[int, dict[str, str]]:
    n, t = claim(db, job_id)
    h = bearer(t)
    assert client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    out = client.get(internal(job_id, n, "spec"), headers=h).json()["output_dir"]
    for step, verified in ((5, True), (10, False)):  # the newest is not verified
        ck = {"step": step, "uri": f"{out}/checkpoint-{step}", "bytes": 1, "metrics": {},
              "verified": verified}  # fmt: skip
        r = client.post(internal(job_id, n, "checkpoints"), json=ck, headers=h)
        assert r.status_code in (200, 201), r.text
    return n, h


def test_storage_unavailable_requeues_from_the_last_verified_checkpoint(
    client: Any, db: Any, admin_token: str
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, h = _run_to_checkpoint(client, db, job_id)
    body = {"status": "failed", "error": OUTAGE}
    r = client.post(internal(job_id, n, "status"), json=body, headers=h)
    assert r.status_code == 200, r.text
    job = db.read(lambda s: s.get(Job, job_id))
    assert (job.status, job.error_type, job.infra_retries) == ("queued", None, 1)
    assert job.resume_from is not None and job.resume_from.endswith("/checkpoint-5")
    attempt = db.read(lambda s: s.query(Attempt).filter_by(job_id=job_id, number=n).one())
    assert attempt.status == "lost" and attempt.end_reason.startswith("storage_unavailable: ")
    events = db.read(lambda s: s.query(Event).filter_by(job_id=job_id).all())
    lost = [e.message for e in events if e.type == "attempt_lost"]
    assert lost and "storage_unavailable" in lost[-1] and "requeued (1/3" in lost[-1]
    # The next attempt runs; the outage outlasts the infra retries: failed, naming it.
    for used in (2, 3, 4):
        n, t = claim(db, job_id)
        r = client.post(internal(job_id, n, "status"), json=body, headers=bearer(t))
        assert r.status_code == 200, r.text
        job = db.read(lambda s: s.get(Job, job_id))
        assert job.status == ("queued" if used <= 3 else "failed")
    assert job.error_type == "retries_exhausted" and "storage_unavailable" in job.error_message


def test_other_errors_still_fail_the_job(client: Any, db: Any, admin_token: str) -> None:
    job_id = submit(client, admin_token)["id"]
    n, h = _run_to_checkpoint(client, db, job_id)
    body = {"status": "failed", "error": {"type": "internal", "message": "a bug"}}
    assert client.post(internal(job_id, n, "status"), json=body, headers=h).status_code == 200
    job = db.read(lambda s: s.get(Job, job_id))
    assert (job.status, job.error_type) == ("failed", "internal")


def test_an_api_call_the_store_fails_past_the_bound_is_503(
    client: Any, db: Any, admin_token: str, monkeypatch: Any
) -> None:
    import socket

    from sqlalchemy import update

    with socket.socket() as s:  # a port nothing listens on: the store is down
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "SHUNTER_S3_MAX_ATTEMPTS": "1",
        "SHUNTER_STORAGE_RETRY_S": "0.5",
    }.items():
        monkeypatch.setenv(name, value)
    job_id = submit(client, admin_token)["id"]
    db.write(
        lambda s: s.execute(
            update(Job).where(Job.id == job_id).values(final_model_uri="s3://b/job/final")
        )
    )
    r = client.get(f"/v1/jobs/{job_id}/checkpoints/final/download", headers=bearer(admin_token))
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "30" and "storage_unavailable" in r.text
