"""Start-up phases (issue #22): each job's attempt gets one ``phase`` event per phase, in
order, each timed from the one before, and the ``shunter_job_phase_seconds`` histogram counts
them. The scheduler writes ``claimed`` and ``launched``, rank 0 the worker phases, the driver's
final status ``succeeded``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from svc_helpers import bearer, claim, internal, submit

from service.scheduler.loop import Scheduler


def _phases(client: Any, token: str, job_id: str) -> list[tuple[str, str, int | None]]:
    events = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(token)).json()["data"]
    return [
        (e["message"].split(":")[0], e["message"], e["attempt"])
        for e in events
        if e["type"] == "phase"
    ]


def _histogram_count(client: Any, phase: str) -> float:
    text = client.get("/metrics").text
    key = f'shunter_job_phase_seconds_count{{phase="{phase}"}} '
    lines = [line for line in text.splitlines() if line.startswith(key)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_scheduler_records_claimed_and_launched(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any, app: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    sched = Scheduler(settings, db, launcher, on_phase=app.state.shunter.on_phase)
    assert sched.tick().started == [f"{job_id}-1"]
    got = _phases(client, admin_token, job_id)
    assert [(name, attempt) for name, _, attempt in got] == [("claimed", 1), ("launched", 1)]
    assert "s after queued;" in got[0][1] and "s after claimed;" in got[1][1]
    assert _histogram_count(client, "claimed") == 1 and _histogram_count(client, "launched") == 1


def test_worker_phases_in_order_once_each_then_succeeded(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, token = claim(db, job_id)
    h = bearer(token)
    running = {"status": "running"}
    assert client.post(internal(job_id, n, "status"), json=running, headers=h).status_code == 200
    t = datetime.now(UTC) - timedelta(seconds=3)
    for i, phase in enumerate(("workers_up", "model_built", "first_step")):
        at = (t + timedelta(seconds=i)).isoformat()
        r = client.post(internal(job_id, n, "phases"), json={"phase": phase, "time": at}, headers=h)
        assert r.status_code == 200, r.text
    # A retried report of a phase writes nothing (the first wins).
    again = {"phase": "model_built", "time": datetime.now(UTC).isoformat()}
    assert client.post(internal(job_id, n, "phases"), json=again, headers=h).status_code == 200
    out = client.get(internal(job_id, n, "spec"), headers=h).json()["output_dir"]
    done = {"status": "succeeded", "final_model_uri": f"{out}/final"}
    assert client.post(internal(job_id, n, "status"), json=done, headers=h).status_code == 200
    got = _phases(client, admin_token, job_id)
    assert [name for name, _, _ in got] == ["workers_up", "model_built", "first_step", "succeeded"]
    # Each timed from the one before it: the worker's own clock, one second apart.
    assert got[1][1].startswith("model_built: 1.00 s after workers_up;")
    assert got[2][1].startswith("first_step: 1.00 s after model_built;")
    assert "s after first_step;" in got[3][1]
    for phase in ("workers_up", "model_built", "first_step", "succeeded"):
        assert _histogram_count(client, phase) == 1, phase


def test_a_phase_needs_the_attempt_token_and_a_known_phase(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, token = claim(db, job_id)
    body = {"phase": "workers_up", "time": datetime.now(UTC).isoformat()}
    assert client.post(internal(job_id, n, "phases"), json=body).status_code == 401
    bad = {**body, "phase": "claimed"}  # the scheduler's, not the worker's
    assert (
        client.post(internal(job_id, n, "phases"), json=bad, headers=bearer(token)).status_code
        == 422
    )
    assert _phases(client, admin_token, job_id) == []
