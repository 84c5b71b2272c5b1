"""The Python client against a live API server (uvicorn + SQLite + in-memory launcher).

Jobs are driven the way the Ray driver would drive them: through the internal endpoints,
with the attempt token the scheduler gave the launcher.
"""

from __future__ import annotations

import threading
import time
import uuid
from itertools import islice

import pytest
from live_server import CPUS, LiveServer, valid_spec

from shunter.client import (
    AuthError,
    Client,
    Conflict,
    NotFound,
    PermissionDenied,
    StreamEvent,
    ValidationError,
)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_whoami_teams_and_tokens(live: LiveServer) -> None:
    with live.client() as admin:
        assert admin.whoami().role == "admin"
        team = _name("team")
        created = admin.create_team(team, quota={"max_gpus": 4}, weight=2)
        assert created.name == team and created.weight == 2
        assert team in {t.name for t in admin.teams()}
        issued = admin.create_token(team=team, role="viewer", name="reader")
        assert issued.token and issued.role == "viewer"
        listed = {t.id: t for t in admin.tokens()}
        assert issued.id in listed and not hasattr(listed[issued.id], "token")
    with Client(live.url, issued.token) as viewer:
        me = viewer.whoami()
        assert (me.team, me.role) == (team, "viewer")
        with pytest.raises(PermissionDenied):
            viewer.submit(valid_spec())
    with live.client() as admin:
        admin.revoke_token(issued.id)
    with Client(live.url, issued.token) as viewer, pytest.raises(AuthError):
        viewer.whoami()


def test_errors_are_typed_and_carry_the_api_message(live: LiveServer) -> None:
    with Client(live.url, "not-a-token") as bad, pytest.raises(AuthError):
        bad.list_page()
    token = live.member_token(_name("err"))
    with Client(live.url, token) as c:
        with pytest.raises(NotFound):
            c.get("no-such-job")
        with pytest.raises(ValidationError) as info:
            c.submit({**valid_spec(), "trainig": {}})
        assert info.value.detail[0]["loc"] == "trainig"
        assert "did you mean 'training'" in info.value.message


def test_job_lifecycle_metrics_checkpoints_events_logs(live: LiveServer) -> None:
    token = live.member_token(_name("life"))
    with Client(live.url, token) as c:
        job = c.submit(valid_spec("life"))
        assert job.status in ("queued", "starting")
        driver = live.driver(job.id)
        driver.status("running")
        for step in range(1, 6):
            driver.loss(step, 5)
        driver.checkpoint(5)
        driver.log("line 1\nline 2\nline 3\n")
        mid = c.get(job.id)
        assert mid.status == "running"
        assert mid.progress is not None and (mid.progress.step, mid.progress.total_steps) == (5, 5)
        final_dir = f"{driver.output_dir()}/final"
        driver.status("succeeded", final_model_uri=final_dir)
        final = c.wait(job.id, timeout=60, poll=0.1)

        assert final.status == "succeeded" and final.terminal
        assert final.final_model_uri == final_dir
        losses = list(c.metrics(job.id, name="loss", limit=2))  # 3 pages of at most 2
        assert [p.step for p in losses] == [1, 2, 3, 4, 5]
        assert losses[0].value > losses[-1].value
        assert {p.name for p in c.metrics(job.id)} == {"loss", "learning_rate"}
        after = list(c.metrics(job.id, after=losses[2].id))
        assert after and all(p.id is not None and p.id > (losses[2].id or 0) for p in after)
        [ckpt] = c.checkpoints(job.id)
        assert (ckpt.step, ckpt.verified) == (5, True)
        moves = [e.to_status for e in c.events(job.id) if e.to_status]
        assert moves[0] == "queued" and moves[-1] == "succeeded" and "running" in moves
        assert c.logs(job.id, tail=14).splitlines() == ["line 2", "line 3"]
        page = c.logs_page(job.id, offset=7)
        assert (page["text"], page["next_offset"], page["size"]) == ("line 2\nline 3\n", 21, 21)
        with pytest.raises(Conflict):
            c.cancel(job.id)


def test_stream_metrics_yields_points_live_and_ends(live: LiveServer) -> None:
    token = live.member_token(_name("sse"))
    with Client(live.url, token) as c:
        job = c.submit(valid_spec("sse"))
        driver = live.driver(job.id)
        driver.status("running")
        driver.loss(1, 4)  # before the stream opens: history
        got: list[StreamEvent] = []
        reader = threading.Thread(target=lambda: got.extend(c.stream_metrics(job.id)))
        reader.start()
        for step in (2, 3, 4):
            driver.loss(step, 4)
        driver.status("succeeded")
        reader.join(timeout=60)
        assert not reader.is_alive(), "the stream did not end after the job succeeded"
    loss_steps = sorted({e.point.step for e in got if e.point and e.point.name == "loss"})
    assert loss_steps == [1, 2, 3, 4]  # history replayed, then the live points
    assert got[-1].event == "end"
    assert any(e.status == "running" for e in got)
    # Resuming after a point id replays only what came later (e.g. after a dropped stream).
    third = next(e.point for e in got if e.point and e.point.name == "loss" and e.point.step == 3)
    with Client(live.url, token) as c:
        rest = [e.point for e in c.stream_metrics(job.id, after=third.id) if e.point]
    assert [(p.name, p.step) for p in rest if p.name == "loss"] == [("loss", 4)]


def test_list_filters_paginate_and_idempotency(live: LiveServer) -> None:
    token = live.member_token(_name("list"))
    with Client(live.url, token) as c:
        key = uuid.uuid4().hex
        first = c.submit(valid_spec("idem"), idempotency_key=key)
        again = c.submit(valid_spec("idem"), idempotency_key=key)
        assert again.id == first.id
        with pytest.raises(ValidationError):
            c.submit(valid_spec("idem-other"), idempotency_key=key)
        others = [c.submit(valid_spec(f"other-{i}")) for i in range(2)]
        ids = {j.id for j in c.list(limit=1)}
        assert ids == {first.id, *(o.id for o in others)}
        assert [j.id for j in c.list(name="other-1")] == [others[1].id]
        page = c.list_page(limit=2)
        assert len(page.data) == 2 and page.next_cursor
        assert len(list(islice(c.list(limit=1), 2))) == 2


def test_cancel_resume_queue_cluster(live: LiveServer) -> None:
    token = live.member_token(_name("cancel"))
    with Client(live.url, token) as c:
        job = c.submit(valid_spec("cancel"))
        live.driver(job.id).status("running")
        cancelled = c.cancel(job.id)
        assert cancelled.status in ("cancelling", "cancelled")
        final = c.wait(job.id, timeout=60, poll=0.1)
        assert final.status == "cancelled"
        assert c.cancel(job.id).status == "cancelled"  # idempotent
        resumed = c.resume(job.id)
        assert resumed.status in ("queued", "starting")
        assert live.launched(job.id, attempt=2).attempt == 2
        cluster = c.cluster()
        assert cluster.total_cpus == CPUS and cluster.nodes
        assert isinstance(c.queue(), list)


def test_queue_shows_position_and_reason(live: LiveServer) -> None:
    team = _name("quota")
    with live.client() as admin:
        admin.create_team(team, quota={"max_running_jobs": 1})
        token = admin.create_token(team=team, role="member", name="q").token
    with Client(live.url, token) as c:
        first = c.submit(valid_spec("q-first"))
        live.launched(first.id)  # holds the team's one running slot
        second = c.submit(valid_spec("q-second"))
        # The scheduler stores the reason on its next tick; the queue page and the job are two
        # reads, and a tick may land between them: wait until both say it.
        reason = "team quota: 1/1 jobs running"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = {e.id: e for e in c.queue()}
            job = c.get(second.id)
            queued = waiting.get(second.id)
            if queued and queued.pending_reason == reason and job.pending_reason == reason:
                break
            time.sleep(0.1)
        entry = waiting[second.id]
        assert (entry.position, entry.team, entry.pending_reason) == (1, team, reason)
        assert (job.status, job.queue_position, job.pending_reason) == ("queued", 1, reason)
        c.cancel(second.id)
        c.cancel(first.id)
