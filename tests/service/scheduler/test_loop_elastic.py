"""Elastic jobs in the live loop (issue 30, item 2): a real database, the in-memory launcher
(no Ray). The issue's live bar step by step: on 4 CPUs an elastic DDP job {min 2, max 4}
starts at 2 while another job holds 2; grows to 4 when that job ends; shrinks to 2 (not
preempted) when a higher-priority job arrives. Each resize is a checkpoint-now stop, a
``resized`` event with its reason and widths, and a new attempt at the width decided, whose
driver gets the spec at that width (same global batch); the attempts list shows each width.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from service.db.tables import Attempt, Job
from service.launch import InMemoryLauncher, LaunchState, LaunchStatus
from service.scheduler.loop import Scheduler
from tests.service.scheduler.test_loop_fair import Harness, cpus, spec
from tests.service.svc_helpers import bearer

ACCUM = 3  # at max 4: widths 2, 3, 4 each take 12 micro-batches a step


def elastic(name: str, lo: int = 2, hi: int = 4, **top: Any) -> dict[str, Any]:
    s = spec(name, **top)
    s["resources"] = {
        "num_workers": {"min": lo, "max": hi},
        "gpus_per_worker": 0,
        "cpus_per_worker": 1,
    }
    s["training"] = {**s["training"], "gradient_accumulation_steps": ACCUM}
    return s


class ElasticHarness(Harness):
    def attempts(self, job_id: str) -> list[Attempt]:
        return list(
            self.db.read(
                lambda s: (
                    s.query(Attempt).filter(Attempt.job_id == job_id).order_by(Attempt.number).all()
                )
            )
        )

    def launched_width(self, job_id: str) -> int:
        sub = next(s for s in reversed(self.launcher.submitted) if s.startswith(job_id))
        return self.launcher.submitted[sub].num_workers

    def resized(self, job_id: str) -> list[str]:
        return [e.message for e in self.events(job_id) if e.type == "resized"]

    def checkpoint_and_stop(self, job_id: str, step: int, *, ray_done: bool = True) -> None:
        """The attempt sees checkpoint-now on its heartbeat and reports ``preempted``;
        ``ray_done``: its Ray job has ended too (else it is still tearing down)."""
        sub = next(s for s in reversed(self.launcher.submitted) if s.startswith(job_id))
        req = self.launcher.submitted[sub]
        base = f"/v1/internal/jobs/{job_id}/attempts/{req.attempt}"
        h = bearer(req.attempt_token)
        beat = self.client.post(f"{base}/heartbeat", json={}, headers=h).json()
        assert (beat["checkpoint_now"], beat["stop_cause"]) == (True, "preempt"), beat
        r = self.client.post(
            f"{base}/status", json={"status": "preempted", "step": step}, headers=h
        )
        assert r.status_code == 200, r.text
        if ray_done:
            self.launcher.states[sub] = LaunchStatus(state=LaunchState.STOPPED)

    def driver_spec(self, job_id: str) -> dict[str, Any]:
        sub = next(s for s in reversed(self.launcher.submitted) if s.startswith(job_id))
        req = self.launcher.submitted[sub]
        r = self.client.get(
            f"/v1/internal/jobs/{job_id}/attempts/{req.attempt}/spec",
            headers=bearer(req.attempt_token),
        )
        assert r.status_code == 200, r.text
        return dict(r.json()["spec"])


@pytest.fixture
def make_h(client: Any, db: Any, launcher: InMemoryLauncher, make_settings: Any) -> Any:
    def _make(**overrides: Any) -> ElasticHarness:
        sched = Scheduler(make_settings(**overrides), db, launcher)
        return ElasticHarness(client, db, launcher, sched)

    return _make


def test_submit_accepts_an_elastic_job_queued_at_min(make_h: Any, make_token: Any) -> None:
    h = make_h()
    h.launcher.nodes = cpus(4)
    job = h.submit(make_token("el", "member"), elastic("e"))
    row = h.job(job)
    assert row.num_workers == 2 and row.spec["resources"]["num_workers"] == {"min": 2, "max": 4}


def test_rigid_jobs_keep_their_width_and_no_resized_event(make_h: Any, make_token: Any) -> None:
    h = make_h()
    h.launcher.nodes = cpus(4)
    job = h.submit(make_token("r", "member"), spec("rigid", workers=3))
    assert h.tick() == [job]
    assert h.launched_width(job) == 3 and [a.num_workers for a in h.attempts(job)] == [3]
    assert h.resized(job) == []


def test_starts_at_min_grows_when_the_other_ends_shrinks_for_a_higher_class(
    make_h: Any, make_token: Any, admin_token: str
) -> None:
    h = make_h(preempt_min_runtime_s=0)
    h.launcher.nodes = cpus(4)
    member, hi = make_token("el", "member"), make_token("hi", "member")
    h.client.patch("/v1/teams/hi", json={"max_priority": "high"}, headers=bearer(admin_token))
    other = h.submit(member, spec("other", workers=2))
    assert h.tick() == [other]
    job = h.submit(member, elastic("e"))
    # 1. Starts at min beside the job that holds 2.
    assert h.tick() == [job]
    assert h.launched_width(job) == 2 and h.job(job).num_workers == 2
    assert h.resized(job) == ["start on 2 workers (min 2, max 4)"]
    got = h.driver_spec(job)  # the rigid spec at 2: the global batch of 4 x 3
    assert got["resources"]["num_workers"] == 2
    assert got["training"]["gradient_accumulation_steps"] == ACCUM * 4 // 2
    assert h.sched.tick().resized == {}  # nothing free, nothing waits: stays
    # 2. The other job ends: it grows (a checkpoint-now stop, then attempt 2 at 4).
    h.finish(other)
    report = h.sched.tick()
    assert report.resized == {job: "grow 2->4"} and report.started == []
    assert h.resized(job)[-1] == "grow 2 -> 4 workers: capacity is idle and no job waits for it"
    assert h.sched.tick().resized == {}  # stopping: asked once
    h.checkpoint_and_stop(job, step=5, ray_done=False)
    assert h.job(job).status == "queued"
    # Its Ray job still holds the old workers (tearing down): it waits for it to end, or it
    # would restart at the old width.
    assert h.tick() == [] and h.job(job).status == "queued"
    sub = next(s for s in reversed(h.launcher.submitted) if s.startswith(job))
    h.launcher.states[sub] = LaunchStatus(state=LaunchState.STOPPED)
    # Ray's usage report still counts 2 CPUs held: the restart waits for the width the grow
    # decided (4) instead of starting at 2 (within RESTART_WAIT_S).
    h.launcher.nodes = [replace(cpus(4)[0], free_cpus=2)]
    assert h.tick() == [] and h.job(job).status == "queued"
    h.launcher.nodes = cpus(4)
    assert h.tick() == [job]
    assert h.launched_width(job) == 4 and h.job(job).num_workers == 4
    assert h.resized(job)[-1] == (
        "start on 4 workers (min 2, max 4): capacity is idle and no job waits for it"
    )
    got = h.driver_spec(job)
    assert got["resources"]["num_workers"] == 4
    assert got["training"]["gradient_accumulation_steps"] == ACCUM
    # 3. A higher class arrives needing 2: the job shrinks instead of being preempted.
    high = h.submit(hi, spec("high", workers=2, priority="high"))
    report = h.sched.tick()
    assert report.preempted == [] and report.started == []
    assert report.resized == {job: "shrink 4->2"}
    assert h.resized(job)[-1] == (
        "shrink 4 -> 2 workers instead of preemption (priority) for a high-priority job of "
        "another team"
    )
    h.checkpoint_and_stop(job, step=9)
    assert (h.job(job).status, h.job(job).num_workers) == ("queued", 2)  # it waits at min
    assert sorted(h.tick()) == sorted([high, job])  # both fit: 2 + 2
    assert h.launched_width(job) == 2 and h.launched_width(high) == 2
    assert [(a.number, a.num_workers, a.status) for a in h.attempts(job)] == [
        (1, 2, "preempted"),
        (2, 4, "preempted"),
        (3, 2, "active"),
    ]
    page = h.client.get(f"/v1/jobs/{job}/attempts", headers=bearer(member)).json()["data"]
    assert [(a["number"], a["num_workers"]) for a in page] == [(1, 2), (2, 4), (3, 2)]


def test_lent_workers_are_reclaimed_for_a_waiting_job_of_the_same_class(
    make_h: Any, make_token: Any
) -> None:
    """Workers above min were lent while nothing waited: a job of the same class that waits
    for them takes them back (no preemption rule needed)."""
    h = make_h()  # preemption's min runtime (300 s) keeps the plan from preempting anyone
    h.launcher.nodes = cpus(4)
    job = h.submit(make_token("el", "member"), elastic("e"))
    assert h.tick() == [job]
    assert h.launched_width(job) == 4  # idle capacity, nobody waits: starts wide
    other = make_token("other", "member")
    assert h.client.get(f"/v1/jobs/{job}/attempts", headers=bearer(other)).status_code == 404
    waiting = h.submit(other, spec("w", workers=2))
    report = h.sched.tick()
    assert report.resized == {job: "reclaim 4->2"} and report.preempted == []
    assert h.resized(job)[-1].startswith("reclaim 4 -> 2 workers: workers lent above min")
    h.checkpoint_and_stop(job, step=3)
    # A resize is not a preemption: ``resized`` events only (no ``preempt_requested`` or
    # ``preempted``, so no ``job.preempted`` webhook and no preemption counted).
    types = [e.type for e in h.events(job)]
    assert "preempt_requested" not in types and "preempted" not in types, types
    assert h.resized(job)[-1].startswith(
        "attempt 1 checkpointed at step 3 and stopped to resize (reclaim 4 -> 2 workers"
    )
    assert h.job(job).pending_reason.startswith("requeued to resize (reclaim 4 -> 2")
    assert sorted(h.tick()) == sorted([job, waiting])
    assert h.launched_width(job) == 2


def test_usage_counts_each_attempt_at_its_width(make_h: Any, make_token: Any) -> None:
    """The fair-share history reads each attempt's width, not the job's current one."""
    from service.scheduler.usage import _read

    h = make_h()
    h.launcher.nodes = cpus(4)
    job = h.submit(make_token("el", "member"), elastic("e"))
    h.tick()
    got = h.db.read(lambda s: _read(s, h.job(job).created_at.replace(year=2000), [job]))
    [(team, interval, _end)] = got[job].values()
    assert (team, interval.cpus) == ("el", 4.0)
    row = h.db.read(lambda s: s.get(Job, job))
    assert row.num_workers == 4


def test_a_restart_waits_for_its_target_width_only_so_long(db: Any) -> None:
    from service.scheduler.resize import Targets

    # "j" has no row: no attempt of it is up on Ray, only the target decides.
    t = Targets(wait_s=0.0)
    t.want("j", 4)
    assert not t.hold(db, InMemoryLauncher(), "j", 2)  # the wait is over: start at 2
    t = Targets(wait_s=60.0)
    t.want("j", 4)
    assert t.hold(db, InMemoryLauncher(), "j", 2)
    assert not t.hold(db, InMemoryLauncher(), "j", 4)  # at the target: go, and forget it
    assert not t.hold(db, InMemoryLauncher(), "j", 2)
