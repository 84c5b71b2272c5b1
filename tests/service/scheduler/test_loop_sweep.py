"""A sweep on the live loop (real database, real scheduler and sweep controller, in-memory
launcher): with ``max_parallel`` 8 on an 8-CPU cluster the sweep borrows the whole cluster
while alone; once another team has work waiting, the trials that end are replaced by that
team's jobs, not by new trials, until each team holds its fair share (4 and 4). Trials are
ordinary jobs: no scheduler code knows about sweeps."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from service.db.tables import Job
from service.launch import InMemoryLauncher
from service.scheduler.loop import Scheduler
from service.sweeps.controller import SweepController
from tests.service.scheduler.test_loop_fair import Harness, cpus, spec
from tests.service.svc_helpers import bearer, tiny_spec


def _sweep_body() -> dict[str, Any]:
    base = tiny_spec("trial", eval_strategy="steps", eval_steps=2)
    base["data"]["eval"] = {"path": "train.tsv", "format": "csv", "delimiter": "\t"}
    return {
        "name": "wide",
        "base": base,
        "space": {"training.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2}},
        "objective": "eval_accuracy",
        "direction": "maximize",
        "max_trials": 16,
        "max_parallel": 8,
        "sampler": "random",
    }


def _running(db: Any, team: str) -> int:
    return len(
        db.read(
            lambda s: s.execute(
                select(Job.id).where(Job.team == team, Job.status == "running")
            ).all()
        )
    )


def test_a_sweep_of_max_parallel_8_yields_to_a_waiting_team(
    client: Any, db: Any, launcher: InMemoryLauncher, make_settings: Any, make_token: Any
) -> None:
    settings = make_settings()
    h = Harness(client, db, launcher, Scheduler(settings, db, launcher))
    ctl = SweepController(settings, db, launcher)
    launcher.nodes = cpus(8)
    sweeper, other = make_token("sweepers", "member"), make_token("others", "member")
    r = client.post("/v1/sweeps", json=_sweep_body(), headers=bearer(sweeper))
    assert r.status_code == 201, r.text
    assert len(ctl.tick().sampled) == 8
    trials = h.tick()
    assert len(trials) == 8  # alone, the sweep borrows the whole cluster
    b_jobs = [h.submit(other, spec(f"b{i}")) for i in range(4)]
    starts: list[str] = []
    running = list(trials)
    for _ in range(4):
        h.finish(running.pop(0))  # a trial ends
        assert len(ctl.tick().sampled) == 1  # and the controller queues the next one
        started = h.tick()
        starts += started
        running += started
    assert starts == b_jobs, starts  # the waiting team's jobs went first, one per freed CPU
    assert (_running(db, "sweepers"), _running(db, "others")) == (4, 4)
    queued = db.read(
        lambda s: s.execute(
            select(Job.id).where(Job.team == "sweepers", Job.status == "queued")
        ).all()
    )
    assert len(queued) == 4  # max_parallel counts queued trials: 4 running + 4 queued
    assert ctl.tick().sampled == []
    # From here the teams alternate as each job ends: the sweep stays at its share.
    for _ in range(4):
        h.finish(running.pop(0))
        ctl.tick()
        running += h.tick()
        assert _running(db, "sweepers") <= 4 and _running(db, "others") <= 4
