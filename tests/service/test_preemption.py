"""Checkpoint-now (service.jobs.checkpoint_now) with the in-memory launcher: a request reaches the
attempt through its heartbeat; the attempt's ``preempted`` report requeues (or pauses) the job
from the checkpoint it just registered, without using an infra retry; an attempt that does not
checkpoint in time is stopped and resumes from its last verified checkpoint; pause/resume over
HTTP; worker-group restarts are counted events; metric points carry their attempt."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from svc_helpers import bearer, claim, internal, submit

from service.db.tables import Attempt, Job
from service.errors import BadRequest
from service.jobs.checkpoint_now import request_preemption
from service.launch import LaunchState, LaunchStatus
from service.scheduler.loop import Scheduler


def _run(client: Any, job_id: str, n: int, token: str) -> dict[str, str]:
    h = bearer(token)
    assert client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    return h


def _ckpt(client: Any, job_id: str, n: int, h: dict[str, str], step: int) -> str:
    out = client.get(internal(job_id, n, "spec"), headers=h).json()["output_dir"]
    uri = f"{out}/checkpoint-{step}"  # a checkpoint must lie in the job's output dir
    body = {"step": step, "uri": uri, "bytes": 10, "verified": True}
    assert client.post(internal(job_id, n, "checkpoints"), json=body, headers=h).status_code == 200
    return uri


def _job(client: Any, token: str, job_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/jobs/{job_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def _events(client: Any, token: str, job_id: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/jobs/{job_id}/events", headers=bearer(token)).json()["data"])


def _attempt_status(db: Any, job_id: str, n: int) -> str:
    return str(
        db.read(
            lambda s: s.execute(
                select(Attempt.status).where(Attempt.job_id == job_id, Attempt.number == n)
            ).scalar_one()
        )
    )


def test_preempt_heartbeat_checkpoint_requeue_resume(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = _run(client, job_id, n, t)
    _ckpt(client, job_id, n, h, 5)  # a periodic checkpoint before the request
    beat = client.post(internal(job_id, n, "heartbeat"), json={}, headers=h).json()
    assert beat["checkpoint_now"] is False and beat["stop_cause"] is None

    assert db.write(
        lambda s: request_preemption(s, job_id=job_id, cause="preempt", detail="for job-x")
    )
    beat = client.post(internal(job_id, n, "heartbeat"), json={}, headers=h).json()
    assert (beat["checkpoint_now"], beat["stop_cause"]) == (True, "preempt")
    assert beat["stop_detail"] == "for job-x"

    # The workers checkpoint at the next step boundary (7), then the driver reports.
    uri = _ckpt(client, job_id, n, h, 7)
    r = client.post(
        internal(job_id, n, "status"), json={"status": "preempted", "step": 7}, headers=h
    )
    assert r.status_code == 200, r.text
    job = _job(client, admin_token, job_id)
    assert job["status"] == "queued" and job["resume_from"] == uri  # THAT checkpoint, not 5
    assert job["error"] is None and "preemption" in job["pending_reason"]
    assert _attempt_status(db, job_id, n) == "preempted"
    infra = db.read(lambda s: s.get(Job, job_id).infra_retries)
    assert infra == 0  # not a failure: no infra retry used
    types = [e["type"] for e in _events(client, admin_token, job_id)]
    assert types[-2:] == ["preempt_requested", "preempted"]
    # The stale attempt is fenced.
    assert client.post(internal(job_id, n, "heartbeat"), json={}, headers=h).status_code == 409

    # The scheduler places it again; the new attempt resumes from the preemption checkpoint
    # and knows how long the job already ran (max_runtime_seconds spans attempts).
    report = Scheduler(settings, db, launcher).tick()
    assert report.started == [f"{job_id}-2"]
    req = launcher.submitted[f"{job_id}-2"]
    spec = client.get(internal(job_id, 2, "spec"), headers=bearer(req.attempt_token)).json()
    assert spec["resume_from"] == uri and spec["runtime_used_s"] >= 0.0
    beat = client.post(internal(job_id, 2, "heartbeat"), json={}, headers=bearer(req.attempt_token))
    assert beat.json()["checkpoint_now"] is False  # the request belonged to attempt 1


def test_runtime_used_sums_earlier_attempts_only(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = _run(client, job_id, n, t)
    db.write(lambda s: request_preemption(s, job_id=job_id, cause="preempt", detail="x"))
    client.post(internal(job_id, n, "status"), json={"status": "preempted", "step": 1}, headers=h)

    def _ran_100s(s: Any) -> None:  # pretend attempt 1 ran 100 s
        started = s.execute(select(Attempt.started_at).where(Attempt.job_id == job_id)).scalar()
        s.execute(
            update(Attempt)
            .where(Attempt.job_id == job_id, Attempt.number == 1)
            .values(ended_at=started + timedelta(seconds=100))
        )

    db.write(_ran_100s)
    n2, t2 = claim(db, job_id)
    spec = client.get(internal(job_id, n2, "spec"), headers=bearer(t2)).json()
    assert spec["runtime_used_s"] == pytest.approx(100.0, abs=0.01)


def test_request_preemption_only_for_running_jobs(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    ask = lambda cause="preempt": db.write(  # noqa: E731
        lambda s: request_preemption(s, job_id=job_id, cause=cause, detail="d")
    )
    assert ask() is False  # queued: nothing to stop
    with pytest.raises(BadRequest, match="cause must be one of"):
        ask("evict")
    n, t = claim(db, job_id)
    _run(client, job_id, n, t)
    assert ask() is True and ask() is True  # idempotent
    assert len([e for e in _events(client, admin_token, job_id) if "requested" in e["type"]]) == 1
    # A pause upgrades a pending preemption (the job must end paused, not requeued).
    assert ask("pause") is True
    beat = client.post(internal(job_id, n, "heartbeat"), json={}, headers=bearer(t)).json()
    assert beat["stop_cause"] == "pause"
    client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(admin_token))
    assert ask() is False  # cancelling


def test_checkpoint_timeout_stops_and_resumes_from_last_verified(
    client: Any, admin_token: str, db: Any, make_settings: Any, launcher: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    sched = Scheduler(make_settings(preempt_checkpoint_timeout_s=0.2), db, launcher)
    sched.tick()
    req = launcher.submitted[f"{job_id}-1"]
    launcher.states[req.submission_id] = LaunchStatus(state=LaunchState.RUNNING)
    h = _run(client, job_id, 1, req.attempt_token)
    uri = _ckpt(client, job_id, 1, h, 4)
    db.write(lambda s: request_preemption(s, job_id=job_id, cause="preempt", detail="late"))
    assert sched.tick().preempt_timeouts == []  # within the timeout: wait
    time.sleep(0.3)
    report = sched.tick()
    assert report.preempt_timeouts == [req.submission_id]
    assert launcher.states[req.submission_id].state == LaunchState.STOPPED
    job = _job(client, admin_token, job_id)
    assert job["resume_from"] == uri and job["status"] in ("queued", "starting")
    assert _attempt_status(db, job_id, 1) == "preempted"
    assert report.started == [f"{job_id}-2"]  # placed again in the same tick
    msg = next(e for e in _events(client, admin_token, job_id) if e["type"] == "preempted")
    assert "did not checkpoint within the timeout" in msg["message"]
    # The old driver's late report is refused.
    late = client.post(
        internal(job_id, 1, "status"), json={"status": "preempted", "step": 9}, headers=h
    )
    assert late.status_code == 409


def test_pause_and_resume_over_http(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    auth = bearer(admin_token)
    queued = submit(client, admin_token)["id"]
    r = client.post(f"/v1/jobs/{queued}/pause", headers=auth)
    assert r.status_code == 200 and r.json()["status"] == "paused"
    assert client.post(f"/v1/jobs/{queued}/pause", headers=auth).json()["status"] == "paused"
    sched = Scheduler(settings, db, launcher)  # one instance: it holds the leader lease
    assert sched.tick().started == []  # paused is not placed

    running = submit(client, admin_token)["id"]
    assert sched.tick().started == [f"{running}-1"]
    token = launcher.submitted[f"{running}-1"].attempt_token
    h = _run(client, running, 1, token)
    r = client.post(f"/v1/jobs/{running}/pause", headers=auth)
    assert r.status_code == 200 and r.json()["status"] == "running"  # until it checkpoints
    beat = client.post(internal(running, 1, "heartbeat"), json={}, headers=h).json()
    assert (beat["checkpoint_now"], beat["stop_cause"]) == (True, "pause")
    uri = _ckpt(client, running, 1, h, 3)
    client.post(internal(running, 1, "status"), json={"status": "preempted", "step": 3}, headers=h)
    job = _job(client, admin_token, running)
    assert (job["status"], job["resume_from"]) == ("paused", uri)
    assert _attempt_status(db, running, 1) == "preempted"

    r = client.post(f"/v1/jobs/{running}/resume", headers=auth)
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert r.json()["resume_from"] == uri
    # A paused job can be cancelled at once; a finished one cannot be paused.
    assert client.post(f"/v1/jobs/{queued}/cancel", headers=auth).json()["status"] == "cancelled"
    r = client.post(f"/v1/jobs/{queued}/pause", headers=auth)
    assert r.status_code == 409 and "only a queued, starting or running job" in r.text


def test_viewer_cannot_pause_other_team_sees_404(
    client: Any, admin_token: str, make_token: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    viewer = make_token("default", "viewer")
    assert client.post(f"/v1/jobs/{job_id}/pause", headers=bearer(viewer)).status_code == 403
    other = make_token("other", "member")
    assert client.post(f"/v1/jobs/{job_id}/pause", headers=bearer(other)).status_code == 404


def test_restart_event_counts_and_metrics_carry_attempt(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = _run(client, job_id, n, t)
    client.post(
        internal(job_id, n, "metrics"),
        json={"points": [{"step": 1, "name": "loss", "value": 2.0}]},
        headers=h,
    )
    body = {
        "rank": 1,
        "node": "10.0.0.7",
        "cause": "ActorDiedError: killed",
        "resumed_from_step": 6,
    }
    assert client.post(internal(job_id, n, "restarts"), json=body, headers=h).status_code == 200
    job = _job(client, admin_token, job_id)
    assert job["restarts"] == 1
    event = _events(client, admin_token, job_id)[-1]
    assert event["type"] == "worker_restarted" and event["attempt"] == n
    for part in ("restart 1/2", "worker rank 1", "node 10.0.0.7", "ActorDiedError", "step 6"):
        assert part in event["message"]
    # A second attempt starts with a fresh restart budget; its points carry its number.
    db.write(lambda s: request_preemption(s, job_id=job_id, cause="preempt", detail="x"))
    client.post(internal(job_id, n, "status"), json={"status": "preempted", "step": 1}, headers=h)
    n2, t2 = claim(db, job_id)
    assert _job(client, admin_token, job_id)["restarts"] == 0
    client.post(
        internal(job_id, n2, "metrics"),
        json={"points": [{"step": 2, "name": "loss", "value": 1.5}]},
        headers=bearer(t2),
    )
    points = client.get(f"/v1/jobs/{job_id}/metrics", headers=bearer(admin_token)).json()["data"]
    assert [(p["step"], p["attempt"]) for p in points] == [(1, 1), (2, 2)]


def test_a_repeated_restart_report_writes_one_event(client: Any, admin_token: str, db: Any) -> None:
    """The controller's outbox may send a restart report twice (its reply lost in a cut, or
    replayed from disk): one event and one count per ``seq``; a later restart still counts."""
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = _run(client, job_id, n, t)
    first = {"rank": 1, "node": "n1", "cause": "ActorDiedError: x", "resumed_from_step": 4}
    for _ in range(3):
        r = client.post(internal(job_id, n, "restarts"), json={**first, "seq": 1}, headers=h)
        assert r.status_code == 200, r.text
    second = {**first, "resumed_from_step": 8, "seq": 2}
    for _ in range(2):
        assert client.post(internal(job_id, n, "restarts"), json=second, headers=h).is_success
    client.post(internal(job_id, n, "restarts"), json={**first, "seq": 1}, headers=h)  # late
    restarted = [e for e in _events(client, admin_token, job_id) if e["type"] == "worker_restarted"]
    assert [("step 4" in e["message"], "step 8" in e["message"]) for e in restarted] == [
        (True, False),
        (False, True),
    ], restarted
    assert _job(client, admin_token, job_id)["restarts"] == 2
