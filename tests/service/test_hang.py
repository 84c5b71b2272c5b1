"""The hang watch (issue 23 item 1): the rule (pure, tables), the admin bounds at submit, and
``HangWatch.sweep`` with the in-memory launcher on SQLite and PostgreSQL: a stalled attempt
gets its stacks stored, a ``hung`` event naming the ranks and the step, and is requeued from
its newest verified checkpoint; a second hang at the same step fails it ``hung``; one query a
tick judges every running job."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select
from svc_helpers import bearer, claim, internal, submit, tiny_spec

from service.db.tables import Attempt, Job
from service.health.hang import HangWatch, watched
from service.health.hang_rule import (
    StepTimes,
    decide_after_hang,
    hang_verdict,
    hung_step,
)
from service.health.rank_files import files_for
from service.jobs.hang_bounds import HangBounds, bound_errors
from service.launch import LaunchState, LaunchStatus, RankStack
from shunter.jobspec import JobSpec
from shunter.jobspec.spec import HangSpec

T0 = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)
HANG = HangSpec(factor=10, floor_s=60, startup_s=120)


@pytest.mark.parametrize(
    ("last_step_after_s", "now_s", "p50", "logging_steps", "want"),
    [
        (None, 119, None, 1, None),  # start-up, inside startup_s
        (None, 121, None, 1, ("startup", 120.0)),  # no step past startup_s
        (10, 69, None, 1, None),  # p50 unknown: the floor alone
        (10, 71, None, 1, ("stalled", 60.0)),
        (10, 71, 1.0, 1, ("stalled", 60.0)),  # 10 x 1 s < floor: the floor
        (10, 71, 8.0, 1, None),  # 10 x 8 s = 80 s > floor: not yet
        (10, 91, 8.0, 1, ("stalled", 80.0)),
        (10, 91, 1.0, 10, None),  # logged every 10 steps: 10 x 1 s x 10 = 100 s
        (10, 111, 1.0, 10, ("stalled", 100.0)),
    ],
)
def test_hang_verdict(
    last_step_after_s: float | None,
    now_s: float,
    p50: float | None,
    logging_steps: int,
    want: tuple[str, float] | None,
) -> None:
    last = None if last_step_after_s is None else T0 + timedelta(seconds=last_step_after_s)
    got = hang_verdict(
        now=T0 + timedelta(seconds=now_s),
        launched_at=T0,
        last_step_at=last,
        p50_step_s=p50,
        logging_steps=logging_steps,
        hang=HANG,
    )
    assert (None if got is None else (got.kind, got.bound_s)) == want


@pytest.mark.parametrize(
    ("step", "earlier", "max_restarts", "fail"),
    [
        (8, [], 2, False),
        (8, [5], 2, False),  # got past the last hang: a new one
        (8, [8], 2, True),  # the same step again: a resume cannot get past it
        (8, [3, 5], 2, True),  # max_restarts used up
        (8, [], 0, True),  # no restart allowed at all
        (None, [None], 2, False),  # start-up hangs count, but have no step to repeat
    ],
)
def test_decide_after_hang(
    step: int | None, earlier: list[int | None], max_restarts: int, fail: bool
) -> None:
    assert decide_after_hang(step=step, earlier=earlier, max_restarts=max_restarts).fail is fail


def test_step_times_p50_one_sample_per_new_step() -> None:
    times = StepTimes()
    key = ("job-1", 1)
    for step, value in [(1, 1.0), (1, 1.0), (2, 3.0), (3, 100.0), (3, 100.0), (4, 2.0)]:
        times.add(key, step=step, value=value)
    assert times.p50(key) == 2.5  # median of 1, 3, 100, 2: one spike does not move it
    times.keep_only(set())
    assert times.p50(key) is None


def test_hung_step_reads_back_its_message() -> None:
    assert hung_step("hung at step 12 (attempt 2): ...") == (True, 12)
    assert hung_step("hung at start-up (attempt 1): ...") == (True, None)
    assert hung_step("attempt 1 lost") == (False, None)


def test_bound_errors_name_the_field_and_the_fix() -> None:
    spec = JobSpec.model_validate({**tiny_spec(), "health": {"hang": {"floor_s": 5}}})
    errors = bound_errors(spec, HangBounds())
    assert [e.loc for e in errors] == ["health.hang.floor_s"]
    assert "SHUNTER_HEALTH_HANG_FLOOR_MIN_S" in errors[0].message
    assert "between 60 and 86400" in errors[0].message
    assert bound_errors(spec, HangBounds(floor_min_s=1)) == []


def test_submit_outside_the_admin_bounds_is_a_422(client: Any, admin_token: str) -> None:
    spec = {**tiny_spec(), "health": {"hang": {"startup_s": 5}}}  # inside the spec's own 1..
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == "health.hang.startup_s"
    assert "SHUNTER_HEALTH_HANG_STARTUP_MIN_S" in r.text and "between 120 and" in r.text
    spec = {**tiny_spec(), "health": {"hang": {"factor": 2000}}}  # outside the spec's own
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == "health.hang.factor"


# -- the watch, on the database ---------------------------------------------------------


def _running(
    client: Any, admin_token: str, db: Any, launcher: Any, **health: Any
) -> tuple[str, int, Any]:
    spec = {**tiny_spec(), "max_restarts": 2, "health": {"hang": health}}
    job_id = submit(client, admin_token, spec)["id"]
    n, token = claim(db, job_id)
    launcher.states[f"{job_id}-{n}"] = LaunchStatus(state=LaunchState.RUNNING)
    h = bearer(token)
    assert client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    return job_id, n, h


def _steps(client: Any, job_id: str, n: int, h: Any, steps: range, step_s: float) -> None:
    points = [{"step": s, "name": "loss", "value": 1.0} for s in steps]
    points += [{"step": s, "name": "step_time_s", "value": step_s} for s in steps]
    body = {"points": points, "progress": {"step": steps[-1], "total_steps": 20}}
    r = client.post(internal(job_id, n, "metrics"), json=body, headers=h)
    assert r.status_code == 200, r.text


def _ckpt(client: Any, job_id: str, n: int, h: Any, step: int) -> str:
    out = client.get(internal(job_id, n, "spec"), headers=h).json()["output_dir"]
    body = {"step": step, "uri": f"{out}/checkpoint-{step}", "bytes": 1, "verified": True}
    r = client.post(internal(job_id, n, "checkpoints"), json=body, headers=h)
    assert r.status_code == 200, r.text
    return str(body["uri"])


def _workers(client: Any, job_id: str, n: int, h: Any, ranks: int = 2) -> None:
    for rank in range(ranks):
        body = {"rank": rank, "pid": 1000 + rank, "node_id": "ab12", "node_ip": "10.0.0.1"}
        r = client.post(internal(job_id, n, "workers"), json=body, headers=h)
        assert r.status_code == 200, r.text


def _watch(settings: Any) -> HangWatch:
    return HangWatch(files=files_for(settings), dump_timeout_s=5, max_infra_retries=3)


def _later(s: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=s)


def test_stalled_attempt_is_dumped_named_and_resumed_then_fails_at_the_same_step(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    job_id, n, h = _running(client, admin_token, db, launcher, floor_s=60)
    _workers(client, job_id, n, h)
    _steps(client, job_id, n, h, range(1, 5), step_s=0.5)
    uri = _ckpt(client, job_id, n, h, 4)
    _steps(client, job_id, n, h, range(5, 7), step_s=0.5)
    launcher.stacks[1] = RankStack(rank=1, state="S", cpu_s=0.9, text="Thread 7: allreduce")
    watch = _watch(settings)
    assert watch.sweep(db, launcher, now=_later(30)) == []  # inside the bound
    assert watch.sweep(db, launcher, now=_later(61)) == [job_id]

    assert [t.pid for t in launcher.dumped[0]] == [1000, 1001]
    events = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(admin_token)).json()["data"]
    hung = next(e for e in events if e["type"] == "hung")
    assert hung["message"].startswith("hung at step 6 (attempt 1)"), hung
    assert "ranks that did not move: 0 (stopped: 0)" in hung["message"]
    assert "ranks still using CPU: 1" in hung["message"]
    assert events[-1]["type"] == "attempt_lost"
    r = client.get(f"/v1/jobs/{job_id}/stacks", params={"attempt": 1}, headers=bearer(admin_token))
    assert r.status_code == 200 and "== rank 1 (pid 1001 on node 10.0.0.1)" in r.text
    assert "allreduce" in r.text
    text = client.get("/metrics").text
    assert 'shunter_training_health_events_total{type="hung"} 1.0' in text
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "queued" and job["resume_from"] == uri
    assert db.read(lambda s: s.get(Job, job_id).infra_retries) == 0  # max_restarts counts it
    assert launcher.status(f"{job_id}-1").state == LaunchState.STOPPED

    # Attempt 2 resumes from step 4, stalls again at step 6: it fails hung.
    n2, t2 = claim(db, job_id)
    h2 = bearer(t2)
    client.post(internal(job_id, n2, "status"), json={"status": "running"}, headers=h2)
    _steps(client, job_id, n2, h2, range(5, 7), step_s=0.5)
    assert watch.sweep(db, launcher, now=_later(61)) == [job_id]
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "failed" and job["error"]["type"] == "hung", job
    assert "hung again at step 6" in job["error"]["message"]
    status = db.read(
        lambda s: s.execute(
            select(Attempt.status).where(Attempt.job_id == job_id, Attempt.number == n2)
        ).scalar_one()
    )
    assert status == "failed"

    # A user's resume starts a fresh budget: the same step may hang once more.
    r = client.post(f"/v1/jobs/{job_id}/resume", headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    n3, t3 = claim(db, job_id)
    h3 = bearer(t3)
    client.post(internal(job_id, n3, "status"), json={"status": "running"}, headers=h3)
    _steps(client, job_id, n3, h3, range(5, 7), step_s=0.5)
    assert watch.sweep(db, launcher, now=_later(61)) == [job_id]
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "queued", job


def test_no_step_past_startup_is_a_hang(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    job_id, _, _ = _running(client, admin_token, db, launcher, startup_s=200)
    watch = _watch(settings)
    assert watch.sweep(db, launcher, now=_later(150)) == []
    assert watch.sweep(db, launcher, now=_later(201)) == [job_id]
    events = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(admin_token)).json()["data"]
    hung = next(e for e in events if e["type"] == "hung")
    assert hung["message"].startswith("hung at start-up (attempt 1): no step")
    assert "ranks that never reported their process: 0" in hung["message"]
    assert launcher.dumped == []  # nobody to dump


def test_a_step_during_the_dump_spares_the_job(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    job_id, n, h = _running(client, admin_token, db, launcher, floor_s=60)
    _workers(client, job_id, n, h, ranks=1)
    _steps(client, job_id, n, h, range(1, 3), step_s=0.5)
    real_dump = launcher.dump_stacks

    def dump_then_step(targets: Any, *, timeout_s: float) -> Any:
        _steps(client, job_id, n, h, range(3, 4), step_s=0.5)  # the gang moved after all
        return real_dump(targets, timeout_s=timeout_s)

    launcher.dump_stacks = dump_then_step
    assert _watch(settings).sweep(db, launcher, now=_later(61)) == []
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "running"


def test_one_query_judges_every_running_job(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    """A sweep's queries do not grow with the jobs: the first reads every watched attempt in
    one query (and their spec fields in one more), later ones only the jobs changed since
    (the watermark, the changed ids, and a read of those when there are any)."""
    jobs = []
    for _ in range(3):
        job_id, n, h = _running(client, admin_token, db, launcher)
        _steps(client, job_id, n, h, range(1, 3), step_s=0.5)
        jobs.append((job_id, n, h))
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    watch = _watch(settings)
    selects = []
    event.listen(db.engine, "before_cursor_execute", count)
    try:
        assert watch.sweep(db, launcher, now=_later(10)) == []
        selects.append(_selects(statements))
        statements.clear()
        assert watch.sweep(db, launcher, now=_later(11)) == []
        selects.append(_selects(statements))
        statements.clear()
        job_id, n, h = jobs[0]
        _steps(client, job_id, n, h, range(3, 4), step_s=0.5)
        statements.clear()
        assert watch.sweep(db, launcher, now=_later(12)) == []
        selects.append(_selects(statements))
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    assert selects == [3, 2, 3], statements


def _selects(statements: list[str]) -> int:
    return sum(1 for s in statements if s.lstrip().upper().startswith("SELECT"))


def test_the_watch_reads_the_spec_fields_it_judges_by(
    client: Any, admin_token: str, db: Any, launcher: Any
) -> None:
    """Only parts of the spec are read (JSON paths); they must be the spec's values."""
    spec = {
        **tiny_spec(logging_steps=4),
        "max_restarts": 3,
        "health": {"hang": {"startup_s": 200, "floor_s": 60, "factor": 5}},
    }
    job_id = submit(client, admin_token, spec)["id"]
    n, _ = claim(db, job_id)
    plain_id, plain_n, plain_h = _running(client, admin_token, db, launcher)
    _steps(client, plain_id, plain_n, plain_h, range(1, 3), step_s=0.5)
    got = {w.job_id: w for w in db.read(watched)}
    w = got[job_id]
    assert (w.attempt, w.has_step, w.step, w.step_time_s) == (n, False, None, None)
    assert (w.logging_steps, w.max_restarts) == (4, 3)
    assert w.hang == HangSpec(startup_s=200, floor_s=60, factor=5)
    plain = got[plain_id]
    assert (plain.has_step, plain.step, plain.step_time_s) == (True, 2, 0.5)
    assert (plain.logging_steps, plain.max_restarts, plain.hang) == (1, 2, HangSpec())


def test_the_scheduler_watch_handles_a_hang_once_and_off_the_tick(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    job_id, n, h = _running(client, admin_token, db, launcher, floor_s=60)
    _workers(client, job_id, n, h, ranks=1)
    _steps(client, job_id, n, h, range(1, 3), step_s=0.5)
    gate = threading.Event()
    real_dump = launcher.dump_stacks

    def slow_dump(targets: Any, *, timeout_s: float) -> Any:
        gate.wait(30)
        return real_dump(targets, timeout_s=timeout_s)

    launcher.dump_stacks = slow_dump
    watch = HangWatch(
        files=files_for(settings), dump_timeout_s=5, max_infra_retries=3, background=True
    )
    try:
        assert watch.sweep(db, launcher, now=_later(61)) == [job_id]  # the tick goes on
        assert watch.sweep(db, launcher, now=_later(62)) == []  # being handled: not twice
        gate.set()
        deadline = time.monotonic() + 30
        while db.read(lambda s: s.get(Job, job_id).status) != "queued":
            assert time.monotonic() < deadline, "the hung job was not requeued"
            time.sleep(0.05)
    finally:
        gate.set()
        watch.close()
    assert len(launcher.dumped) == 1


def test_cut_off_is_not_hung_and_the_clock_restarts_when_its_beats_return(
    client: Any, admin_token: str, db: Any, settings: Any, launcher: Any
) -> None:
    """An attempt whose heartbeats are missing (cut off from the API, or the database away)
    is not judged: its steps cannot reach the service, but a hung job's driver still beats.
    Once its beats are back, the stall clock starts from the last sweep that saw it silent;
    a job that then makes no step within the bound is still caught."""
    job_id, n, h = _running(client, admin_token, db, launcher, floor_s=60)
    _steps(client, job_id, n, h, range(1, 3), step_s=0.5)
    watch = HangWatch(
        files=files_for(settings), dump_timeout_s=5, max_infra_retries=3, lease_seconds=30
    )

    def silent() -> None:  # no heartbeat for longer than a third of the lease
        db.write(
            lambda s: s.execute(
                Attempt.__table__.update()
                .where(Attempt.job_id == job_id, Attempt.number == n)
                .values(lease_expires_at=datetime.now(UTC) + timedelta(seconds=5))
            )
        )

    silent()
    assert watch.sweep(db, launcher, now=_later(61)) == []  # steps stale, but beats missing
    assert watch.sweep(db, launcher, now=_later(90)) == []
    r = client.post(internal(job_id, n, "heartbeat"), json={}, headers=h)
    assert r.status_code == 200, r.text  # the path is back
    assert watch.sweep(db, launcher, now=_later(91)) == []  # the replay has a whole bound
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()["status"] == (
        "running"
    )
    assert watch.sweep(db, launcher, now=_later(151)) == [job_id]  # beating, yet no step
    # Without the lease the watch judges by steps alone (as before): hung at 61 s.
    job2, n2, h2 = _running(client, admin_token, db, launcher, floor_s=60)
    _steps(client, job2, n2, h2, range(1, 3), step_s=0.5)
    assert _watch(settings).sweep(db, launcher, now=_later(61)) == [job2]
