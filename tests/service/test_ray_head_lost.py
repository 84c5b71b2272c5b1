"""The Ray head lost (issue 32, item 3), on the live scheduler with an in-memory launcher
whose head can be "away" (every call raises ``ClusterUnavailable``, as ``RayLauncher`` does
when its dashboard or GCS does not answer):

- while the head is away the sweep decides nothing: a running job stays ``running``, nothing
  is placed, the queue says the cluster is unreachable;
- when it answers again, an attempt Ray no longer knows (or fails) is lost with cause
  ``ray_head_lost`` and resumes from its newest verified checkpoint (event ``resumed``); one
  Ray still runs and whose driver heartbeats goes on (event ``survived``, once); Ray's word
  alone (a head restarted on a Redis calls a dead job running for a while) decides nothing;
- a lease that expires while the head is away is lost with the head too, and the job waits
  in the queue (not placed on a cluster that does not answer);
- without an outage a driver that ended is ``driver_ended`` as before (no head event).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from service.db.tables import Attempt, Event
from service.launch import (
    ClusterResources,
    ClusterUnavailable,
    InMemoryLauncher,
    LaunchState,
    LaunchStatus,
)
from service.scheduler.loop import Scheduler
from tests.service.scheduler.test_loop_fair import Harness, cpus, spec
from tests.service.svc_helpers import bearer


@dataclass(kw_only=True)
class HeadLauncher(InMemoryLauncher):
    """``InMemoryLauncher`` whose head can be away."""

    away: bool = False

    def _check(self) -> None:
        if self.away:
            raise ClusterUnavailable("ray head unavailable (test): ConnectionError")

    def cluster(self) -> ClusterResources:
        self._check()
        return super().cluster()

    def status(self, submission_id: str) -> LaunchStatus:
        self._check()
        return super().status(submission_id)

    def statuses(self, submission_ids: list[str]) -> dict[str, LaunchStatus]:
        self._check()
        return super().statuses(submission_ids)

    def stop(self, submission_id: str) -> None:
        self._check()
        super().stop(submission_id)


@pytest.fixture
def launcher() -> HeadLauncher:
    out = HeadLauncher()
    out.nodes = cpus(4)
    return out


def _events(db: Any, job_id: str) -> list[tuple[str, str, int | None]]:
    out: list[tuple[str, str, int | None]] = db.read(
        lambda s: [
            (e.type, e.message, e.attempt)
            for e in s.execute(
                select(Event).where(Event.job_id == job_id).order_by(Event.id)
            ).scalars()
        ]
    )
    return out


def _attempts(db: Any, job_id: str) -> list[tuple[int, str, str | None]]:
    out: list[tuple[int, str, str | None]] = db.read(
        lambda s: [
            (a.number, a.status, a.end_reason)
            for a in s.execute(
                select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.number)
            ).scalars()
        ]
    )
    return out


@pytest.fixture
def running(
    client: Any, db: Any, admin_token: str, launcher: HeadLauncher, make_settings: Any
) -> Any:
    """``running(**settings)``: a scheduler and one job it placed, now running."""

    def _make(**settings: Any) -> tuple[Harness, str]:
        h = Harness(client, db, launcher, Scheduler(make_settings(**settings), db, launcher))
        job_id = h.submit(admin_token, spec("headlost"))
        assert h.tick() == [job_id]
        assert h.job(job_id).status == "running"
        return h, job_id

    return _make


def _checkpoint(client: Any, launcher: HeadLauncher, job_id: str, step: int) -> str:
    """Attempt 1 registers a verified checkpoint at ``step``; its uri."""
    token = launcher.submitted[f"{job_id}-1"].attempt_token
    url = f"/v1/internal/jobs/{job_id}/attempts/1/checkpoints"
    out = client.get(f"/v1/internal/jobs/{job_id}/attempts/1/spec", headers=bearer(token))
    uri = f"{out.json()['output_dir']}/checkpoint-{step}"
    body = {"step": step, "uri": uri, "bytes": 1, "metrics": {}, "verified": True}
    r = client.post(url, json=body, headers=bearer(token))
    assert r.status_code in (200, 201), r.text
    return uri


def test_head_away_decides_nothing_then_a_lost_attempt_resumes_with_an_event(
    client: Any, db: Any, launcher: HeadLauncher, running: Any
) -> None:
    h, job_id = running()
    uri = _checkpoint(client, launcher, job_id, 4)
    launcher.away = True
    for _ in range(3):
        report = h.sched.tick()
        assert report.swept == {} and report.started == [] and report.reaped == []
    assert h.job(job_id).status == "running"  # nothing decided on a head that is away
    assert _attempts(db, job_id) == [(1, "active", None)]
    # The head is back without the attempt (a new head, or Ray marked it failed).
    launcher.away = False
    launcher.states[f"{job_id}-1"] = LaunchStatus(state=LaunchState.UNKNOWN)
    report = h.sched.tick()
    assert report.swept == {job_id: "lose"}
    (number, status, reason), *rest = _attempts(db, job_id)
    assert (number, status) == (1, "lost") and reason is not None
    assert reason.startswith("the Ray head was lost"), reason
    assert [n for n, _, _ in rest] == [2]  # requeued and placed again once the head answers
    lost = [e for e in _events(db, job_id) if e[0] == "ray_head_lost"]
    assert len(lost) == 1 and lost[0][2] == 1
    assert lost[0][1].startswith("resumed: attempt 1 was lost with the Ray head"), lost
    assert f"attempt 2 resumes from checkpoint {uri}" in lost[0][1], lost
    assert h.sched.tick().swept.get(job_id) != "lose"  # said once, not at every tick


def _heartbeat(client: Any, launcher: HeadLauncher, job_id: str) -> None:
    token = launcher.submitted[f"{job_id}-1"].attempt_token
    r = client.post(
        f"/v1/internal/jobs/{job_id}/attempts/1/heartbeat", json={}, headers=bearer(token)
    )
    assert r.status_code == 200, r.text


def _head_events(db: Any, job_id: str) -> list[str]:
    return [m for t, m, _ in _events(db, job_id) if t == "ray_head_lost"]


def test_head_back_with_the_attempt_still_running_says_survived_once_it_heartbeats(
    client: Any, db: Any, launcher: HeadLauncher, running: Any
) -> None:
    h, job_id = running()
    launcher.away = True
    h.sched.tick()
    launcher.away = False  # GCS fault tolerance: Ray still runs the driver
    assert h.sched.tick().swept == {job_id: "keep"}
    assert _head_events(db, job_id) == []  # Ray's word alone: the verdict waits
    time.sleep(0.05)
    _heartbeat(client, launcher, job_id)  # the driver is alive: its heartbeat lands
    assert h.sched.tick().swept == {job_id: "keep"}
    assert h.job(job_id).status == "running" and h.job(job_id).attempt == 1
    (said,) = _head_events(db, job_id)
    assert said.startswith("survived:"), said
    h.sched.tick()
    assert len(_head_events(db, job_id)) == 1


def test_a_restarted_head_that_still_calls_it_running_then_fails_it_resumes(
    db: Any, launcher: HeadLauncher, running: Any
) -> None:
    """A head restarted on a Redis remembers the job as running, then notices its supervisor
    died with the old node and fails it: no ``survived`` in between, one ``resumed``."""
    h, job_id = running()
    launcher.away = True
    h.sched.tick()
    launcher.away = False
    for _ in range(3):  # running by Ray's word, but no heartbeat: no verdict yet
        assert h.sched.tick().swept == {job_id: "keep"}
    assert _head_events(db, job_id) == []
    launcher.states[f"{job_id}-1"] = LaunchStatus(
        state=LaunchState.FAILED, message="Job supervisor actor died"
    )
    assert h.sched.tick().swept == {job_id: "lose"}
    (said,) = _head_events(db, job_id)
    assert said.startswith("resumed: attempt 1"), said
    assert (_attempts(db, job_id)[0][2] or "").startswith("the Ray head was lost")


def test_an_expired_lease_after_an_outage_is_lost_with_the_head_though_ray_says_running(
    db: Any, launcher: HeadLauncher, running: Any
) -> None:
    h, job_id = running()
    launcher.away = True
    h.sched.tick()
    launcher.away = False
    h.sched.tick()
    _expire(db, job_id)  # no heartbeat since the head went: the driver went with it
    report = h.sched.tick()
    assert report.reaped == [f"{job_id}-1"]
    assert _attempts(db, job_id)[0][2] == "the Ray head was lost"
    (said,) = _head_events(db, job_id)
    assert said.startswith("resumed:"), said


def _expire(db: Any, job_id: str) -> None:
    db.write(
        lambda s: s.execute(
            update(Attempt)
            .where(Attempt.job_id == job_id)
            .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=5))
        )
    )


def test_a_lease_that_expires_while_the_head_is_away_is_lost_with_it_and_waits(
    db: Any, launcher: HeadLauncher, running: Any
) -> None:
    h, job_id = running()
    launcher.away = True
    _expire(db, job_id)  # the lease expires while the head is away: no heartbeat came
    report = h.sched.tick()
    assert report.reaped == [f"{job_id}-1"] and report.started == []
    job = h.job(job_id)
    assert job.status == "queued"  # requeued, but not placed on a head that does not answer
    assert "unreachable" in (job.pending_reason or ""), job.pending_reason
    assert _attempts(db, job_id)[0][2] == "the Ray head was lost"
    lost = [e for e in _events(db, job_id) if e[0] == "ray_head_lost"]
    assert len(lost) == 1 and lost[0][1].startswith("resumed:"), lost
    launcher.away = False
    assert h.tick() == [job_id]  # placed once the head answers
    assert [n for n, _, _ in _attempts(db, job_id)] == [1, 2]


def test_without_an_outage_an_ended_driver_is_driver_ended(
    db: Any, launcher: HeadLauncher, running: Any
) -> None:
    h, job_id = running()
    launcher.states[f"{job_id}-1"] = LaunchStatus(state=LaunchState.FAILED, message="boom")
    assert h.sched.tick().swept == {job_id: "lose"}
    assert (_attempts(db, job_id)[0][2] or "").startswith("driver ended")
    assert not [e for e in _events(db, job_id) if e[0] == "ray_head_lost"]
