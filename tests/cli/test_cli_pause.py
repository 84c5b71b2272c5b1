"""``shunter pause`` / ``shunter resume`` and ``Client.pause`` against a live API server: the
running job hears ``checkpoint_now`` in its heartbeat, checkpoints, ends ``paused``, and
``resume`` requeues it from that checkpoint."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from live_server import LiveServer, valid_spec
from typer.testing import CliRunner, Result

from shunter.cli import app
from shunter.client.errors import Conflict


def run(live: LiveServer, *args: str, token: str) -> Result:
    return CliRunner().invoke(app, [*args, "--url", live.url, "--token", token])


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_pause_resume_commands(live: LiveServer) -> None:
    member = live.member_token(f"pause-{uuid.uuid4().hex[:6]}")
    client = live.client(member)
    job = client.submit(valid_spec("pausing"))
    driver = live.driver(job.id)
    driver.status("running")
    driver.loss(1, 10)

    asked = as_json(run(live, "pause", job.id, "--json", token=member))
    assert asked["status"] == "running"  # until the workers checkpoint
    beat = driver._post("/heartbeat", {})
    assert beat["checkpoint_now"] is True and beat["stop_cause"] == "pause"
    driver.checkpoint(2)
    driver.status("preempted", step=2)
    paused = client.get(job.id)
    assert paused.status == "paused" and paused.terminal is False
    assert "paused" in run(live, "show", job.id, token=member).stdout

    resumed = as_json(run(live, "resume", job.id, "--json", token=member))
    assert resumed["status"] in ("queued", "starting")
    assert resumed["resume_from"].endswith("step-2")
    # Attempt 2 resumes and succeeds; a finished job cannot be paused (409), nor an unknown one.
    second = live.driver(job.id, attempt=2)
    second.status("running")
    second.status("succeeded")
    with pytest.raises(Conflict, match="only a queued, starting or running job"):
        client.pause(job.id)
    assert run(live, "pause", job.id, token=member).exit_code == 5
    assert run(live, "pause", "job-nope", token=member).exit_code == 4
