"""Sweeps with the in-memory launcher: the submit checks (a space that can give an invalid
spec is refused naming its path), trials as ordinary jobs capped by max_parallel, pruning
through the checkpoint-now mechanism (ends ``pruned`` with the checkpoint kept), restart
safety (exactly max_trials, no duplicate params, a preempted trial is not re-sampled), the
sweep's own budget, cancel, and the best trial. SQLite and PostgreSQL."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from svc_helpers import bearer, claim, internal, tiny_spec

from service.db.tables import Attempt, Job, Sweep, SweepTrial
from service.jobs.checkpoint_now import request_preemption
from service.sweeps.controller import SweepController


def _base(**training: Any) -> dict[str, Any]:
    spec = tiny_spec("base", eval_strategy="steps", eval_steps=2, **training)
    spec["data"]["eval"] = {"path": "train.tsv", "format": "csv", "delimiter": "\t"}
    return spec


def _sweep(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "lr",
        "base": _base(),
        "space": {
            "training.learning_rate": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True}
        },
        "objective": "eval_accuracy",
        "direction": "maximize",
        "max_trials": 4,
        "max_parallel": 2,
        "sampler": "random",
        "seed": 7,
    }
    return {**body, **overrides}


def _post(client: Any, token: str, body: dict[str, Any]) -> Any:
    return client.post("/v1/sweeps", json=body, headers=bearer(token))


def _get(client: Any, token: str, sweep_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/sweeps/{sweep_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return dict(r.json())


def _run(client: Any, db: Any, job_id: str) -> tuple[int, dict[str, str]]:
    n, token = claim(db, job_id)
    h = bearer(token)
    assert client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    return n, h


def _report(client: Any, job_id: str, n: int, h: dict[str, str], step: int, acc: float) -> None:
    body = {"points": [{"step": step, "name": "eval_accuracy", "value": acc}]}
    r = client.post(internal(job_id, n, "metrics"), json=body, headers=h)
    assert r.status_code == 200, r.text


def _succeed(client: Any, job_id: str, n: int, h: dict[str, str]) -> None:
    r = client.post(internal(job_id, n, "status"), json={"status": "succeeded"}, headers=h)
    assert r.status_code == 200, r.text


def _statuses(client: Any, token: str, sweep_id: str) -> list[str]:
    return [t["status"] for t in _get(client, token, sweep_id)["trials"]]


# -- submit checks ------------------------------------------------------------------------


def test_a_space_that_can_give_an_invalid_spec_is_refused_naming_the_path(
    client: Any, admin_token: str, db: Any
) -> None:
    body = _sweep(space={"resources.num_workers": {"type": "int", "low": 0, "high": 4}})
    r = _post(client, admin_token, body)
    assert r.status_code == 422, r.text
    locs = [d["loc"] for d in r.json()["detail"]]
    assert locs == ["space.resources.num_workers"], r.json()
    assert "0 gives an invalid trial spec" in r.json()["message"]
    # 1..16 workers of 1 CPU: the low corner is fine, 16 does not fit the 8-CPU cluster (pass 2).
    body = _sweep(space={"resources.num_workers": {"type": "int", "low": 1, "high": 16}})
    r = _post(client, admin_token, body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "space.resources.num_workers"
    assert "16 gives an invalid trial spec" in r.json()["message"]
    # One bad corner among several parameters is still blamed on its own path.
    body = _sweep(
        space={
            "training.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3},
            "training.optim": {"type": "categorical", "choices": ["adamw_torch", "rmsprop"]},
        }
    )
    r = _post(client, admin_token, body)
    assert r.status_code == 422 and [d["loc"] for d in r.json()["detail"]] == [
        "space.training.optim"
    ]
    assert db.read(lambda s: s.execute(select(Sweep)).first()) is None  # nothing stored


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"objective": "eval_bleu"}, "objective"),
        ({"sampler": "grid"}, "space.training.learning_rate"),
        ({"pruner": "asha", "pruner_settings": {"reduction": 3}}, "pruner_settings.reduction"),
        ({"max_parallel": 9}, "max_parallel"),
        (
            {"space": {"training.output_dir": {"type": "categorical", "choices": ["x"]}}},
            "space.training.output_dir",
        ),
        ({"space": {"bad path": {"type": "int", "low": 1, "high": 2}}}, "space.bad path"),
        (
            {"space": {"training.seed": {"type": "int", "low": 1, "high": 2}}, "max_trials": 3},
            "max_trials",
        ),
        ({"base": {**_base(), "training": {"max_steps": 0}}}, "base.training.max_steps"),
    ],
)
def test_sweep_body_errors_name_the_field(
    client: Any, admin_token: str, change: dict[str, Any], loc: str
) -> None:
    r = _post(client, admin_token, _sweep(**change))
    assert r.status_code == 422, r.text
    assert loc in [d["loc"] for d in r.json()["detail"]], r.json()


def test_pruning_needs_step_evaluations(client: Any, admin_token: str) -> None:
    base = _base()
    base["training"]["eval_strategy"] = "epoch"
    del base["training"]["eval_steps"]
    r = _post(client, admin_token, _sweep(base=base, pruner="asha"))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "base.training.eval_strategy"


# -- trials are jobs ----------------------------------------------------------------------


def test_trials_are_jobs_capped_by_max_parallel_and_never_sampled_twice(
    client: Any, admin_token: str, make_token: Any, db: Any, settings: Any, launcher: Any
) -> None:
    member = make_token("ml", "member")
    r = _post(client, member, _sweep())
    assert r.status_code == 201, r.text
    sweep_id = r.json()["id"]
    assert r.json()["status"] == "running" and r.json()["trials"] == []
    ctl = SweepController(settings, db, launcher)
    assert len(ctl.tick().sampled) == 2  # max_parallel
    assert ctl.tick().sampled == []
    got = _get(client, member, sweep_id)
    assert [t["status"] for t in got["trials"]] == ["queued", "queued"]
    for t in got["trials"]:
        job = client.get(f"/v1/jobs/{t['job_id']}", headers=bearer(member)).json()
        assert job["team"] == "ml" and job["name"] == f"lr-t{t['number']}"
        lr = t["params"]["training.learning_rate"]
        assert 1e-6 <= lr <= 1e-1 and job["spec"]["training"]["learning_rate"] == lr
        events = client.get(f"/v1/jobs/{t['job_id']}/events", headers=bearer(member)).json()
        assert [e["type"] for e in events["data"]] == ["submitted", "sweep_trial"]
    # A finished trial frees a slot; the objective and best step are read from its metrics.
    first = got["trials"][0]["job_id"]
    n, h = _run(client, db, first)
    for step, acc in ((2, 0.6), (4, 0.8), (6, 0.7)):
        _report(client, first, n, h, step, acc)
    _succeed(client, first, n, h)
    assert len(ctl.tick().sampled) == 1
    got = _get(client, member, sweep_id)
    t0 = got["trials"][0]
    assert (t0["objective"], t0["objective_step"], t0["best_value"], t0["best_step"]) == (
        0.7, 6, 0.8, 4,
    )  # fmt: skip
    assert got["best_trial"]["number"] == 0
    assert got["counts"] == {"succeeded": 1, "queued": 2}
    # Everything ends: exactly max_trials trials, all params distinct, the sweep succeeded.
    while True:
        live = [t for t in _get(client, member, sweep_id)["trials"] if t["status"] == "queued"]
        if not live:
            break
        for t in live:
            n, h = _run(client, db, t["job_id"])
            _report(client, t["job_id"], n, h, 2, 0.5 + 0.1 * t["number"])
            _succeed(client, t["job_id"], n, h)
        ctl.tick()
    got = _get(client, member, sweep_id)
    assert got["status"] == "succeeded" and len(got["trials"]) == 4
    params = [t["params"]["training.learning_rate"] for t in got["trials"]]
    assert len(set(params)) == 4
    assert got["best_trial"]["number"] == 3  # 0.8 at its last evaluation beats trial 0's 0.7
    listed = client.get("/v1/sweeps", headers=bearer(member)).json()["data"]
    assert [s["id"] for s in listed] == [sweep_id] and listed[0]["trials"] == []


def test_asha_prunes_a_running_trial_at_its_next_step_boundary(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    body = _sweep(
        max_trials=3,
        max_parallel=3,
        pruner="asha",
        pruner_settings={"min_resource": 2, "reduction_factor": 2},
    )
    sweep_id = _post(client, admin_token, body).json()["id"]
    ctl = SweepController(settings, db, launcher)
    ctl.tick()
    trials = _get(client, admin_token, sweep_id)["trials"]
    runs = {t["number"]: (t["job_id"], *_run(client, db, t["job_id"])) for t in trials}
    job0, n0, h0 = runs[0]
    job1, n1, h1 = runs[1]
    _report(client, job0, n0, h0, 2, 0.9)
    assert ctl.tick().pruned == []  # the first at rung 0 goes on
    _report(client, job1, n1, h1, 2, 0.5)
    assert ctl.tick().pruned == [job1]  # not in the top half of rung 0
    beat = client.post(internal(job1, n1, "heartbeat"), json={}, headers=h1).json()
    assert (beat["checkpoint_now"], beat["stop_cause"]) == (True, "prune")
    # The workers checkpoint at the next step boundary (3) and report; the trial is pruned.
    out = client.get(internal(job1, n1, "spec"), headers=h1).json()["output_dir"]
    ck = {"step": 3, "uri": f"{out}/checkpoint-3", "bytes": 10, "verified": True}
    assert client.post(internal(job1, n1, "checkpoints"), json=ck, headers=h1).status_code == 200
    r = client.post(
        internal(job1, n1, "status"), json={"status": "preempted", "step": 3}, headers=h1
    )
    assert r.status_code == 200, r.text
    job = client.get(f"/v1/jobs/{job1}", headers=bearer(admin_token)).json()
    assert job["status"] == "pruned" and job["error"] is None
    assert job["resume_from"] == f"{out}/checkpoint-3"  # its last checkpoint is kept
    events = client.get(f"/v1/jobs/{job1}/events", headers=bearer(admin_token)).json()["data"]
    assert "asha pruner at step 2" in next(e for e in events if e["type"] == "pruned")["message"]
    assert client.post(f"/v1/jobs/{job1}/resume", headers=bearer(admin_token)).status_code == 409
    got = _get(client, admin_token, sweep_id)
    assert got["trials"][1]["pruned_at_step"] == 2 and got["trials"][1]["status"] == "pruned"
    # A queued (preempted meanwhile) trial the pruner stops ends pruned at once.
    job2, n2, h2 = runs[2]
    _report(client, job2, n2, h2, 2, 0.1)
    db.write(lambda s: request_preemption(s, job_id=job2, cause="preempt", detail="x"))
    r = client.post(
        internal(job2, n2, "status"), json={"status": "preempted", "step": 2}, headers=h2
    )
    assert ctl.tick().pruned == [job2]
    assert client.get(f"/v1/jobs/{job2}", headers=bearer(admin_token)).json()["status"] == "pruned"


def test_restart_neither_loses_nor_resamples_and_a_preempted_trial_stays_itself(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    sweep_id = _post(client, admin_token, _sweep(max_trials=5, max_parallel=2)).json()["id"]
    first = SweepController(settings, db, launcher)
    first.tick()
    first.stop()  # gives the lease up, as a process shutting down does
    trials = _get(client, admin_token, sweep_id)["trials"]
    job0 = trials[0]["job_id"]
    n, h = _run(client, db, job0)
    db.write(lambda s: request_preemption(s, job_id=job0, cause="preempt", detail="fair share"))
    client.post(internal(job0, n, "status"), json={"status": "preempted", "step": 1}, headers=h)
    assert client.get(f"/v1/jobs/{job0}", headers=bearer(admin_token)).json()["status"] == "queued"
    second = SweepController(settings, db, launcher)  # the service after a restart
    assert second.tick().sampled == []  # the preempted trial is still one of the two
    # Two controllers at once: only the lease holder acts.
    third = SweepController(settings, db, launcher)
    assert third.tick().leader is False
    for _ in range(10):
        for t in _get(client, admin_token, sweep_id)["trials"]:
            if t["status"] == "queued":
                n, h = _run(client, db, t["job_id"])
                _report(client, t["job_id"], n, h, 2, 0.5)
                _succeed(client, t["job_id"], n, h)
        second.tick()
    got = _get(client, admin_token, sweep_id)
    assert got["status"] == "succeeded" and len(got["trials"]) == 5
    assert len({t["params"]["training.learning_rate"] for t in got["trials"]}) == 5
    assert got["trials"][0]["job_id"] == job0
    rows = db.read(lambda s: s.execute(select(SweepTrial.number)).scalars().all())
    assert sorted(rows) == [0, 1, 2, 3, 4]


def test_the_sweeps_budget_stops_sampling(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    body = _sweep(max_trials=6, max_parallel=1, budget={"cpu_hours": 0.01})
    sweep_id = _post(client, admin_token, body).json()["id"]
    ctl = SweepController(settings, db, launcher)
    ctl.tick()
    job0 = _get(client, admin_token, sweep_id)["trials"][0]["job_id"]
    n, h = _run(client, db, job0)
    _report(client, job0, n, h, 2, 0.5)
    _succeed(client, job0, n, h)
    # The attempt held 1 CPU for 40 s > 36 CPU-seconds.
    ended = db.read(
        lambda s: s.execute(select(Attempt.ended_at).where(Attempt.job_id == job0)).scalar_one()
    )
    db.write(
        lambda s: s.execute(
            update(Attempt)
            .where(Attempt.job_id == job0)
            .values(started_at=ended - timedelta(seconds=40))
        )
    )
    assert ctl.tick().sampled == []
    got = _get(client, admin_token, sweep_id)
    assert got["status"] == "succeeded" and len(got["trials"]) == 1
    assert got["cpu_hours_used"] == pytest.approx(40 / 3600, rel=0.01)


def test_a_team_past_its_hard_budget_cannot_submit_a_sweep_and_soft_trials_queue_low(
    client: Any, admin_token: str, make_token: Any, db: Any, settings: Any, launcher: Any
) -> None:
    member = make_token("ml", "member")
    body = {"budget": {"cpu_hours": 0, "mode": "hard"}}
    assert client.patch("/v1/teams/ml", json=body, headers=bearer(admin_token)).status_code == 200
    r = _post(client, member, _sweep())
    assert r.status_code == 403 and "budget" in r.json()["message"]
    body = {"budget": {"cpu_hours": 0, "mode": "soft"}}
    assert client.patch("/v1/teams/ml", json=body, headers=bearer(admin_token)).status_code == 200
    sweep_id = _post(client, member, _sweep()).json()["id"]
    SweepController(settings, db, launcher).tick()
    for t in _get(client, member, sweep_id)["trials"]:
        job = client.get(f"/v1/jobs/{t['job_id']}", headers=bearer(member)).json()
        assert job["priority"] == "low"


def test_cancelling_a_sweep_cancels_its_trials(
    client: Any, admin_token: str, make_token: Any, db: Any, settings: Any, launcher: Any
) -> None:
    member = make_token("ml", "member")
    other = make_token("other", "member")
    sweep_id = _post(client, member, _sweep()).json()["id"]
    ctl = SweepController(settings, db, launcher)
    ctl.tick()
    running = _get(client, member, sweep_id)["trials"][0]["job_id"]
    _run(client, db, running)
    assert client.post(f"/v1/sweeps/{sweep_id}/cancel", headers=bearer(other)).status_code == 404
    r = client.post(f"/v1/sweeps/{sweep_id}/cancel", headers=bearer(member))
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled"
    assert sorted(t["status"] for t in r.json()["trials"]) == ["cancelled", "cancelling"]
    assert ctl.tick().sampled == []
    assert client.post(f"/v1/sweeps/{sweep_id}/cancel", headers=bearer(member)).status_code == 200


def test_grid_sampler_covers_the_grid_once(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    space = {
        "training.per_device_train_batch_size": {"type": "categorical", "choices": [4, 8]},
        "training.seed": {"type": "int", "low": 1, "high": 3},
    }
    body = _sweep(space=space, sampler="grid", max_trials=6, max_parallel=6)
    sweep_id = _post(client, admin_token, body).json()["id"]
    SweepController(settings, db, launcher).tick()
    trials = _get(client, admin_token, sweep_id)["trials"]
    points = {
        (t["params"]["training.per_device_train_batch_size"], t["params"]["training.seed"])
        for t in trials
    }
    assert points == {(b, s) for b in (4, 8) for s in (1, 2, 3)}
    jobs = db.read(lambda s: s.execute(select(Job.spec)).scalars().all())
    assert all(copy.deepcopy(j["training"]["per_device_train_batch_size"]) in (4, 8) for j in jobs)


def test_a_deleted_trial_leaves_a_gap_and_the_sweep_goes_on(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    body = _sweep(max_trials=3, max_parallel=1, pruner="median")
    body["pruner_settings"] = {"n_startup_trials": 0}
    sweep_id = _post(client, admin_token, body).json()["id"]
    ctl = SweepController(settings, db, launcher)
    ctl.tick()
    job0 = _get(client, admin_token, sweep_id)["trials"][0]["job_id"]
    n, h = _run(client, db, job0)
    _report(client, job0, n, h, 2, 0.9)
    _succeed(client, job0, n, h)
    ctl.tick()  # trial 1
    assert client.delete(f"/v1/jobs/{job0}", headers=bearer(admin_token)).status_code == 204
    job1 = _get(client, admin_token, sweep_id)["trials"][0]["job_id"]
    n, h = _run(client, db, job1)
    _report(client, job1, n, h, 2, 0.5)
    _succeed(client, job1, n, h)
    report = ctl.tick()
    assert report.errors == [] and len(report.sampled) == 1
    got = _get(client, admin_token, sweep_id)
    assert [t["number"] for t in got["trials"]] == [1, 2]
    # The pruner still finds trial 2 by its number (the study numbers it 1).
    job2 = got["trials"][1]["job_id"]
    n, h = _run(client, db, job2)
    _report(client, job2, n, h, 2, 0.1)
    assert ctl.tick().pruned == [job2]
