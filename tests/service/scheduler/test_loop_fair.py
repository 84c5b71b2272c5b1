"""The live loop over the fair-share policy: real database, in-memory launcher (no Ray).

The issue's live bar in miniature (two equal teams on 2 CPUs, 1-CPU jobs: B's first job
starts before A's third), quota changes applied on the next tick, a priority preemption
request with privacy-respecting events on both jobs, and ETAs stored per tick.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from service.db.tables import Event, Job
from service.launch import InMemoryLauncher, LaunchState, LaunchStatus, NodeResources
from service.scheduler.loop import Scheduler
from tests.service.svc_helpers import bearer, tiny_spec


def cpus(n: float) -> list[NodeResources]:
    return [
        NodeResources(
            node_id="n1",
            address="127.0.0.1",
            alive=True,
            total_cpus=n,
            free_cpus=n,
            total_gpus=0,
            free_gpus=0,
        )
    ]


def spec(name: str, *, workers: int = 1, priority: str = "normal", **top: Any) -> dict[str, Any]:
    s = tiny_spec(name)
    s["resources"] = {"num_workers": workers, "gpus_per_worker": 0, "cpus_per_worker": 1}
    return {**s, "priority": priority, **top}


class Harness:
    def __init__(self, client: Any, db: Any, launcher: InMemoryLauncher, sched: Scheduler) -> None:
        self.client, self.db, self.launcher, self.sched = client, db, launcher, sched

    def submit(self, token: str, s: dict[str, Any]) -> str:
        r = self.client.post("/v1/jobs", json=s, headers=bearer(token))
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def run(self, job_id: str) -> None:
        """The driver of the job's current attempt reports running."""
        sub = next(s for s in reversed(self.launcher.submitted) if s.startswith(job_id))
        req = self.launcher.submitted[sub]
        self.launcher.states[sub] = LaunchStatus(state=LaunchState.RUNNING)
        r = self.client.post(
            f"/v1/internal/jobs/{job_id}/attempts/{req.attempt}/status",
            json={"status": "running", "error": None, "final_model_uri": None},
            headers=bearer(req.attempt_token),
        )
        assert r.status_code == 200, r.text

    def finish(self, job_id: str) -> None:
        sub = next(s for s in reversed(self.launcher.submitted) if s.startswith(job_id))
        req = self.launcher.submitted[sub]
        r = self.client.post(
            f"/v1/internal/jobs/{job_id}/attempts/{req.attempt}/status",
            json={"status": "succeeded", "error": None, "final_model_uri": None},
            headers=bearer(req.attempt_token),
        )
        assert r.status_code == 200, r.text
        self.launcher.states[sub] = LaunchStatus(state=LaunchState.SUCCEEDED)

    def tick(self) -> list[str]:
        """One tick; the job ids it started (now running)."""
        started = [s.rsplit("-", 1)[0] for s in self.sched.tick().started]
        for job_id in started:
            self.run(job_id)
        return started

    def job(self, job_id: str) -> Job:
        row = self.db.read(lambda s: s.get(Job, job_id))
        assert row is not None
        return row  # type: ignore[no-any-return]

    def events(self, job_id: str) -> list[Event]:
        return list(
            self.db.read(
                lambda s: s.query(Event).filter(Event.job_id == job_id).order_by(Event.id).all()
            )
        )


@pytest.fixture
def make_h(client: Any, db: Any, launcher: InMemoryLauncher, make_settings: Any) -> Any:
    def _make(**overrides: Any) -> Harness:
        return Harness(client, db, launcher, Scheduler(make_settings(**overrides), db, launcher))

    return _make


def test_equal_teams_share_two_cpus_b_starts_before_a_third(make_h: Any, make_token: Any) -> None:
    h = make_h()
    h.launcher.nodes = cpus(2)
    a, b = make_token("team-a", "member"), make_token("team-b", "member")
    a_jobs = [h.submit(a, spec(f"a{i}")) for i in range(4)]
    order = h.tick()  # A alone: idle capacity is lent, two of A's start
    assert order == a_jobs[:2]
    b_jobs = [h.submit(b, spec(f"b{i}")) for i in range(4)]
    running = list(order)
    while len(order) < 8:
        h.finish(running.pop(0))  # the oldest running job ends
        started = h.tick()
        order += started
        running += started
    assert order.index(b_jobs[0]) < order.index(a_jobs[2]), order
    # With a CPU each, the teams alternate from then on.
    assert order[2:6] == [b_jobs[0], a_jobs[2], b_jobs[1], a_jobs[3]], order


def test_quota_change_applies_on_the_next_tick(
    make_h: Any, make_token: Any, admin_token: str
) -> None:
    h = make_h()
    h.launcher.nodes = cpus(4)
    member = make_token("q", "member")
    h.client.patch(
        "/v1/teams/q", json={"quota": {"max_running_jobs": 1}}, headers=bearer(admin_token)
    )
    first, second = h.submit(member, spec("one")), h.submit(member, spec("two"))
    assert h.tick() == [first]
    assert h.tick() == []
    assert "team quota: 1/1 jobs running" in (h.job(second).pending_reason or "")
    r = h.client.patch(
        "/v1/teams/q", json={"quota": {"max_running_jobs": 2}}, headers=bearer(admin_token)
    )
    assert r.status_code == 200
    assert h.tick() == [second]  # same Scheduler object: no restart


def test_higher_class_preempts_and_events_respect_privacy(
    make_h: Any, make_token: Any, admin_token: str
) -> None:
    h = make_h(preempt_min_runtime_s=0)
    h.launcher.nodes = cpus(2)
    low_team, high_team = make_token("lows", "member"), make_token("highs", "member")
    h.client.patch("/v1/teams/highs", json={"max_priority": "high"}, headers=bearer(admin_token))
    low = h.submit(low_team, spec("low", workers=2, priority="low"))
    assert h.tick() == [low]
    high = h.submit(high_team, spec("high", priority="high"))
    report = h.sched.tick()
    assert report.preempted == [low] and report.started == []
    low_events = [e for e in h.events(low) if e.type == "preempt_requested"]
    assert len(low_events) == 1
    assert high not in low_events[0].message and "high-priority job of another team" in (
        low_events[0].message
    )
    mine = [e for e in h.events(high) if e.type == "preempting"]
    assert len(mine) == 1 and low not in mine[0].message
    # Asked once: the next tick waits for the checkpoint instead of asking again.
    assert h.sched.tick().preempted == []


@pytest.mark.parametrize(("min_runtime_s", "preemptible"), [(0.0, False)], ids=["opted-out"])
def test_not_preemptible_jobs_are_kept(
    make_h: Any, make_token: Any, admin_token: str, min_runtime_s: float, preemptible: bool
) -> None:
    h = make_h(preempt_min_runtime_s=min_runtime_s)
    h.launcher.nodes = cpus(2)
    member = make_token("lows", "member")
    low = spec("low", workers=2, priority="low", scheduling={"preemptible": preemptible})
    low_id = h.submit(member, low)
    assert h.tick() == [low_id]
    h.submit(admin_token, spec("high", priority="high"))
    assert h.sched.tick().preempted == []


def test_etas_are_stored_each_tick(make_h: Any, make_token: Any) -> None:
    h = make_h()
    h.launcher.nodes = cpus(1)
    member = make_token("eta", "member")
    first = h.submit(member, spec("first", max_runtime_seconds=100))
    second = h.submit(member, spec("second", max_runtime_seconds=50))
    third = h.submit(member, spec("third"))  # no bound: nothing after it can be estimated
    assert h.tick() == [first]
    h.sched.tick()
    one, two, three = h.job(first), h.job(second), h.job(third)
    assert one.estimated_end_at is not None and one.started_at is not None
    assert two.estimated_start_at is not None
    gap = two.estimated_start_at - one.estimated_end_at
    assert abs(gap) < timedelta(seconds=1)
    assert three.estimated_start_at is not None  # after second's bound: 150 s after first
    assert abs(three.estimated_start_at - two.estimated_start_at - timedelta(seconds=50)) < (
        timedelta(seconds=1)
    )
    assert (two.queue_position, three.queue_position) == (1, 2)


def test_prometheus_shows_teams_shares_leader_and_ticks(
    make_h: Any, make_token: Any, client: Any, admin_token: str
) -> None:
    h = make_h()
    h.launcher.nodes = cpus(2)
    a = make_token("team-a", "member")
    for i in range(3):
        h.submit(a, spec(f"a{i}"))
    h.tick()
    client.app.state.shunter.scheduler = h.sched  # as if it ran in this process
    text = client.get("/metrics").text
    assert 'shunter_team_jobs{state="running",team="team-a"} 2.0' in text
    assert 'shunter_team_jobs{state="queued",team="team-a"} 1.0' in text
    assert 'shunter_team_cpus_held{team="team-a"} 2.0' in text
    assert 'shunter_team_fair_share{team="team-a"} 1.0' in text
    assert 'shunter_team_owed_share_seconds{team="team-a"}' in text
    assert f'holder="{h.sched.lease.holder}"' in text
    assert "shunter_scheduler_ticks_total 1.0" in text
    assert "shunter_job_wait_seconds_count" in text


def test_etas_on_the_job_object_and_the_queue_page(
    make_h: Any, make_token: Any, client: Any
) -> None:
    h = make_h()
    h.launcher.nodes = cpus(1)
    member = make_token("eta", "member")
    first = h.submit(member, spec("first", max_runtime_seconds=100))
    second = h.submit(member, spec("second"))
    h.tick()
    h.sched.tick()
    running = client.get(f"/v1/jobs/{first}", headers=bearer(member)).json()
    queued = client.get(f"/v1/jobs/{second}", headers=bearer(member)).json()
    assert running["estimated_end_at"] is not None and running["estimated_start_at"] is None
    assert queued["estimated_start_at"] == running["estimated_end_at"]
    # The range's late end: with no history yet (no attempt has ended) nothing widens it.
    assert queued["estimated_start_p90_at"] == queued["estimated_start_at"]
    assert running["estimated_start_p90_at"] is None
    page = client.get("/v1/queue", headers=bearer(member)).json()["data"]
    assert [(q["id"], q["estimated_start_at"], q["estimated_start_p90_at"]) for q in page] == [
        (second, queued["estimated_start_at"], queued["estimated_start_p90_at"])
    ]


def test_unchanged_queue_rows_are_not_rewritten(make_h: Any, make_token: Any) -> None:
    from sqlalchemy import event

    h = make_h()
    h.launcher.nodes = cpus(1)
    member = make_token("calm", "member")
    h.submit(member, spec("first", max_runtime_seconds=100))
    h.submit(member, spec("second"))
    h.tick()
    h.sched.tick()  # positions, reasons and ETAs stored
    updates: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE JOBS"):
            updates.append(statement)

    engine = h.db.engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        h.sched.tick()
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert updates == []


def test_the_leader_advances_each_teams_owed_account(make_h: Any, make_token: Any) -> None:
    """A holds both CPUs and has a third job waiting while B waits: over the time between
    ticks B is owed half the cluster per second and A owes it (equal weights); the account
    lives in the database."""
    from service.db.tables import Team

    h = make_h()
    h.launcher.nodes = cpus(2)
    a, b = make_token("team-a", "member"), make_token("team-b", "member")
    for i in range(3):
        h.submit(a, spec(f"a{i}"))
    assert len(h.tick()) == 2
    h.submit(b, spec("b0"))
    h.tick()  # accrues from the previous tick's time; now: A holds 1.0, B demands 0.5

    def backdate(s: Any) -> None:
        for t in s.query(Team).filter(Team.owed_at.is_not(None)):  # one clock for all
            t.owed_at = t.owed_at - timedelta(seconds=100)

    before = {t.name: t.owed_s for t in h.db.read(lambda s: s.query(Team).all())}
    h.db.write(backdate)
    h.tick()
    after = {t.name: t.owed_s for t in h.db.read(lambda s: s.query(Team).all())}
    assert after["team-b"] - before["team-b"] == pytest.approx(50.0, abs=2.0)
    assert after["team-a"] - before["team-a"] == pytest.approx(-50.0, abs=2.0)


def test_jobs_past_the_plan_depth_keep_their_eta_marked_stale(
    make_h: Any, make_token: Any, client: Any
) -> None:
    h = make_h(scheduler_max_plan_depth=1)
    h.launcher.nodes = cpus(1)
    member = make_token("deep", "member")
    first = h.submit(member, spec("first", max_runtime_seconds=100))
    second = h.submit(member, spec("second", max_runtime_seconds=50))
    third = h.submit(member, spec("third", max_runtime_seconds=50))
    assert h.tick() == [first]  # only the first in order is considered
    assert h.job(second).queue_stale and h.job(third).queue_stale
    h.sched.tick()  # now `second` heads the queue: the depth reaches it, not `third`
    two, three = h.job(second), h.job(third)
    assert not two.queue_stale and two.estimated_at is not None
    assert two.estimated_start_at is not None and two.queue_position == 1
    assert three.queue_stale and three.estimated_at is None and three.estimated_start_at is None
    got = client.get(f"/v1/jobs/{third}", headers=bearer(member)).json()
    assert got["estimate_stale"] is True and got["estimated_at"] is None
    page = client.get("/v1/queue", headers=bearer(member)).json()["data"]
    assert [(q["id"], q["estimate_stale"]) for q in page] == [(second, False), (third, True)]
    assert page[0]["estimated_at"] is not None
    assert set(h.sched.stats.last_split) == {
        "sweeps",
        "snapshot",
        "plan",
        "starts",
        "etas",
        "writes",
    }
    # A later tick that reaches it (depth raised) refreshes it and clears the mark.
    h.sched.settings.scheduler_max_plan_depth = 5
    h.sched.tick()
    three = h.job(third)
    assert not three.queue_stale and three.estimated_at is not None
    assert three.estimated_start_at is not None
