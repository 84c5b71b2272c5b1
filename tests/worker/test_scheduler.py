"""Scheduler ticks against the real database and the in-memory launcher (no Ray).

Covers: claim + submit with a working attempt token, gang placement across nodes, no
double-booking of a just-claimed job, a job that can never fit the shrunk cluster (waits,
blocks nobody), a driver that died without reporting (lost -> requeued -> attempt 2 with
resume_from), the retry budget (``retries_exhausted``), cancel (stop, then cancelled), the
lease reaper, and reconcile on start-up.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from service.jobs.reconcile import Decision, reconcile_on_start
from service.launch import InMemoryLauncher, LaunchState, LaunchStatus, NodeResources
from service.scheduler.loop import Scheduler

TOKENIZER = "models/all-MiniLM-L6-v2"  # linked into the data root on start; no Hub


def spec(name: str, workers: int = 1, cpus: float = 1, priority: str = "normal") -> dict[str, Any]:
    return {
        "name": name,
        "model": {
            "from_scratch": True,
            "task": "sequence-classification",
            "num_labels": 2,
            "tokenizer": TOKENIZER,
            "config_overrides": {
                "model_type": "bert",
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
            },
        },
        "data": {
            "train": {"path": "train.tsv", "format": "csv", "delimiter": "\t"},
            "text_field": "sentence",
            "label_field": "label",
        },
        "training": {"max_steps": 5},
        "resources": {"num_workers": workers, "gpus_per_worker": 0, "cpus_per_worker": cpus},
        "priority": priority,
    }


def node(nid: str, cpus: float, free: float | None = None) -> NodeResources:
    return NodeResources(
        node_id=nid,
        address="127.0.0.1",
        alive=True,
        total_cpus=cpus,
        free_cpus=cpus if free is None else free,
        total_gpus=0,
        free_gpus=0,
    )


@pytest.fixture
def h(client: Any, admin_token: str, db: Any, settings: Any, launcher: InMemoryLauncher) -> Any:
    class H:
        sched = Scheduler(settings, db, launcher)

        def submit(self, s: dict[str, Any]) -> str:
            r = client.post("/v1/jobs", json=s, headers={"Authorization": f"Bearer {admin_token}"})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        def job(self, job_id: str) -> dict[str, Any]:
            r = client.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {admin_token}"})
            return dict(r.json())

        def set_state(self, sub: str, state: LaunchState, msg: str = "") -> None:
            launcher.states[sub] = LaunchStatus(state=state, message=msg)

    H.client, H.launcher, H.db = client, launcher, db  # type: ignore[attr-defined]
    return H()


def test_tick_claims_and_submits_with_a_working_attempt_token(h: Any) -> None:
    job_id = h.submit(spec("a"))
    report = h.sched.tick()
    assert report.started == [f"{job_id}-1"]
    req = h.launcher.submitted[f"{job_id}-1"]
    assert (req.job_id, req.attempt, req.num_workers) == (job_id, 1, 1)
    assert h.job(job_id)["status"] == "starting"
    r = h.client.get(
        f"/v1/internal/jobs/{job_id}/attempts/1/spec",
        headers={"Authorization": f"Bearer {req.attempt_token}"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["name"] == "a"
    assert h.sched.tick().started == []  # claimed once only


def test_gang_spans_nodes_and_a_claimed_job_is_not_double_booked(h: Any) -> None:
    h.launcher.nodes = [node("n1", 1), node("n2", 1)]
    first = h.submit(spec("first", workers=2))
    second = h.submit(spec("second", workers=1))
    assert h.sched.tick().started == [f"{first}-1"]
    # Ray still reports everything free (no placement group yet): our own packing holds.
    report = h.sched.tick()
    assert report.started == []
    assert "waiting for resources" in report.waiting[second]
    assert "waiting for resources" in (h.job(second)["pending_reason"] or "")


def test_a_job_that_can_never_fit_the_shrunk_cluster_waits_and_blocks_nobody(h: Any) -> None:
    big = h.submit(spec("big", workers=4, priority="high"))
    small = h.submit(spec("small", workers=1))
    h.launcher.nodes = [node("n1", 2)]  # the cluster shrank after submit
    report = h.sched.tick()
    assert report.started == [f"{small}-1"]
    reason = h.job(big)["pending_reason"]
    assert h.job(big)["status"] == "queued"
    assert "cannot fit the cluster" in reason and "4 x" in reason


def _run(h: Any, job_id: str, attempt: int) -> str:
    """Tick until ``attempt`` is submitted; mark it running in the launcher and the API."""
    sub = f"{job_id}-{attempt}"
    h.sched.tick()
    req = h.launcher.submitted[sub]
    h.set_state(sub, LaunchState.RUNNING)
    r = h.client.post(
        f"/v1/internal/jobs/{job_id}/attempts/{attempt}/status",
        json={"status": "running", "error": None, "final_model_uri": None},
        headers={"Authorization": f"Bearer {req.attempt_token}"},
    )
    assert r.status_code == 200, r.text
    return str(req.attempt_token)


def test_dead_driver_is_lost_requeued_with_resume_from_then_retries_exhaust(h: Any) -> None:
    job_id = h.submit(spec("flaky"))
    token = _run(h, job_id, 1)
    auth = {"Authorization": f"Bearer {token}"}
    out = h.client.get(f"/v1/internal/jobs/{job_id}/attempts/1/spec", headers=auth).json()
    ckpt = f"{out['output_dir']}/checkpoint-3"  # inside the job's output dir (issue 10)
    r = h.client.post(
        f"/v1/internal/jobs/{job_id}/attempts/1/checkpoints",
        json={"step": 3, "uri": ckpt, "bytes": 10, "metrics": {}, "verified": True},
        headers=auth,
    )
    assert r.status_code == 200, r.text
    h.set_state(f"{job_id}-1", LaunchState.FAILED, "entrypoint exited with -9")
    report = h.sched.tick()  # sweep loses attempt 1 and requeues; place starts attempt 2
    assert report.swept[job_id] == Decision.LOSE
    assert f"{job_id}-2" in h.launcher.submitted
    spec2 = h.client.get(
        f"/v1/internal/jobs/{job_id}/attempts/2/spec",
        headers={"Authorization": f"Bearer {h.launcher.submitted[f'{job_id}-2'].attempt_token}"},
    ).json()
    assert spec2["resume_from"] == ckpt
    # The old attempt is fenced.
    late = h.client.post(
        f"/v1/internal/jobs/{job_id}/attempts/1/heartbeat",
        json={},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert late.status_code == 409
    # settings.max_infra_retries (default 3) losses are requeued; the next one fails the job.
    attempt = 2
    while h.job(job_id)["status"] != "failed":
        h.set_state(f"{job_id}-{attempt}", LaunchState.FAILED, "driver died")
        h.sched.tick()
        attempt += 1
        assert attempt < 10, "the retry budget never ran out"
    job = h.job(job_id)
    assert job["error"]["type"] == "retries_exhausted"
    assert job["attempt"] == h.sched.settings.max_infra_retries + 1
    assert h.sched.tick().started == []  # not a loop


def test_cancel_stops_the_launch_then_finishes_cancelled(h: Any, admin_token: str) -> None:
    job_id = h.submit(spec("c"))
    _run(h, job_id, 1)
    r = h.client.post(
        f"/v1/jobs/{job_id}/cancel", headers={"Authorization": f"Bearer {admin_token}"}
    )
    assert r.status_code in (200, 202), r.text
    h.sched.tick()
    assert h.launcher.status(f"{job_id}-1").state == LaunchState.STOPPED
    h.sched.tick()
    job = h.job(job_id)
    assert job["status"] == "cancelled" and job["error"]["type"] == "cancelled"
    for _ in range(2):
        h.sched.tick()
    assert h.job(job_id)["status"] == "cancelled" and f"{job_id}-2" not in h.launcher.submitted


def test_reaper_loses_an_attempt_whose_lease_expired(
    make_settings: Any, db: Any, h: Any, launcher: InMemoryLauncher
) -> None:
    sched = Scheduler(make_settings(lease_seconds=0.2, lease_grace_s=0), db, launcher)
    job_id = h.submit(spec("lease"))
    sched.tick()
    time.sleep(1.2)  # SQLite's clock has second resolution in places: be generous
    # Still pending in Ray (the driver never ran, so it could not heartbeat): renewed.
    assert sched.tick().reaped == [] and h.job(job_id)["status"] == "starting"
    launcher.states[f"{job_id}-1"] = LaunchStatus(state=LaunchState.RUNNING)
    time.sleep(1.2)
    report = sched.tick()
    assert f"{job_id}-1" in report.reaped
    assert launcher.status(f"{job_id}-1").state == LaunchState.STOPPED  # old driver stopped
    assert f"{job_id}-2" in launcher.submitted


def test_an_expired_lease_whose_driver_ray_runs_is_held_for_the_grace(
    make_settings: Any, db: Any, h: Any, launcher: InMemoryLauncher
) -> None:
    """Heartbeats that could not land (a worker cut off from the API, the database away) do
    not lose an attempt Ray still runs, for ``lease_grace_s``; one that stays silent past it
    is lost; one Ray no longer runs is lost at once."""
    sched = Scheduler(make_settings(lease_seconds=0.2, lease_grace_s=3600), db, launcher)
    held = h.submit(spec("held"))
    gone = h.submit(spec("gone"))
    sched.tick()
    launcher.states[f"{held}-1"] = LaunchStatus(state=LaunchState.RUNNING)
    launcher.states[f"{gone}-1"] = LaunchStatus(state=LaunchState.FAILED)
    time.sleep(1.2)  # both leases expired on the database clock
    report = sched.tick()
    assert report.reaped == [f"{gone}-1"], report
    assert sched.tick().reaped == [] and h.job(held)["status"] == "starting"
    assert f"{held}-2" not in launcher.submitted  # no second placement while it is held
    sched.settings.lease_grace_s = 0.5  # the silence outlasts the grace
    time.sleep(0.6)
    assert sched.tick().reaped == [f"{held}-1"]
    assert launcher.status(f"{held}-1").state == LaunchState.STOPPED


def test_reconcile_on_start_keeps_live_attempts_and_requeues_vanished_ones(
    h: Any, settings: Any
) -> None:
    live = h.submit(spec("live"))
    gone = h.submit(spec("gone"))
    _run(h, live, 1)
    h.sched.tick()
    h.launcher.states.pop(f"{gone}-1", None)  # Ray has no record of it (e.g. a new cluster)
    h.launcher.submitted.pop(f"{gone}-1", None)
    decisions = reconcile_on_start(h.db, h.launcher, settings)
    assert decisions == {live: Decision.KEEP, gone: Decision.LOSE}
    assert h.job(live)["status"] == "running"
    assert h.job(gone)["status"] == "queued" and h.job(gone)["attempt"] == 1
