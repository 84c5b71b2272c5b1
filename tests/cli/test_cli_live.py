"""``shunter`` user commands through Typer's CliRunner against a live API server.

Checks outputs, ``--json`` and the exit codes scripts rely on (0 ok, 1 job failed/cancelled,
2 invalid, 3 auth, 4 not found, 5 other API errors).
"""

from __future__ import annotations

import csv
import io
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_server import LiveServer, valid_spec
from typer.testing import CliRunner, Result

from shunter.cli import app
from shunter.client import Client


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def run(live: LiveServer, *args: str, token: str | None = None) -> Result:
    argv = [*args, "--url", live.url, "--token", token or live.admin_token]
    return CliRunner().invoke(app, argv)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def member(live: LiveServer) -> str:
    return live.member_token(_name("cli"))


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(valid_spec("cli-job")))
    return path


def _drive(live: LiveServer, job_id: str, *, steps: int, end: str) -> threading.Thread:
    """In the background: run ``steps`` steps of loss, then end as ``end``."""

    def go() -> None:
        driver = live.driver(job_id)
        driver.status("running")
        for step in range(1, steps + 1):
            driver.loss(step, steps)
            time.sleep(0.05)
        if end == "failed":
            driver.status("failed", error={"type": "user_error", "message": "bad batch"})
        else:
            driver.status(end)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_submit_with_set_then_jobs_show_and_json(
    live: LiveServer, member: str, spec_file: Path
) -> None:
    job = as_json(
        run(
            live,
            "submit",
            str(spec_file),
            "--set",
            "training.learning_rate=3e-5",
            "--set",
            "name=cli-set",
            "--json",
            token=member,
        )
    )
    assert job["name"] == "cli-set"
    assert job["spec"]["training"]["learning_rate"] == pytest.approx(3e-5)
    listed = as_json(run(live, "jobs", "--name", "cli-set", "--json", token=member))
    assert [j["id"] for j in listed] == [job["id"]]
    table = run(live, "jobs", token=member)
    assert table.exit_code == 0 and "cli-set" in table.stdout
    shown = as_json(run(live, "show", job["id"], "--json", token=member))
    assert shown["id"] == job["id"]
    human = run(live, "show", job["id"], token=member)
    assert human.exit_code == 0 and job["id"] in human.stdout


def test_exit_codes(live: LiveServer, member: str, spec_file: Path, tmp_path: Path) -> None:
    assert run(live, "show", "nope", token=member).exit_code == 4
    bad_token = run(live, "jobs", token="wrong")
    assert bad_token.exit_code == 3 and "401" in bad_token.output
    with Client(live.url, member) as me, live.client() as admin:
        viewer = admin.create_token(team=me.whoami().team or "", role="viewer", name="v")
    assert run(live, "submit", str(spec_file), token=viewer.token).exit_code == 3
    invalid = run(live, "submit", str(spec_file), "--set", "training.max_stepz=3", token=member)
    assert invalid.exit_code == 2
    assert "training.max_stepz: unknown field; did you mean 'max_steps'?" in invalid.output
    unreachable = CliRunner().invoke(app, ["jobs", "--url", "http://127.0.0.1:9", "--token", "x"])
    assert unreachable.exit_code == 5
    err = CliRunner().invoke(app, ["show", "nope", "--json", "--url", live.url, "--token", member])
    assert err.exit_code == 4 and json.loads(err.stderr)["error"]["status"] == 404


def test_watch_until_succeeded_shows_progress_and_sparkline(
    live: LiveServer, member: str, spec_file: Path
) -> None:
    job = as_json(run(live, "submit", str(spec_file), "--json", token=member))
    driver = _drive(live, job["id"], steps=12, end="succeeded")
    result = run(live, "watch", job["id"], "--poll", "0.2", token=member)
    driver.join(60)
    assert result.exit_code == 0, result.output
    assert "succeeded" in result.stdout
    assert "12/12" in result.stdout
    assert "loss █" in result.stdout  # the sparkline starts at the highest loss
    assert "▁" in result.stdout


def test_submit_watch_failed_job_exits_1_with_error(
    live: LiveServer, member: str, spec_file: Path
) -> None:
    # --watch needs the job id before the job runs; the driver thread waits for the launch.
    holder: dict[str, threading.Thread] = {}

    def drive_when_submitted() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for key, req in list(live.launcher.submitted.items()):
                if req.job_id not in seen and key.endswith("-1"):
                    holder["t"] = _drive(live, req.job_id, steps=3, end="failed")
                    return
            time.sleep(0.05)

    seen = {r.job_id for r in live.launcher.submitted.values()}
    watcher = threading.Thread(target=drive_when_submitted, daemon=True)
    watcher.start()
    result = run(live, "submit", str(spec_file), "--watch", "--poll", "0.2", "--json", token=member)
    watcher.join(60)
    assert result.exit_code == 1, result.output
    final = json.loads(result.stdout)
    assert final["status"] == "failed"
    assert final["error"] == {"type": "user_error", "message": "bad batch"}


def test_metrics_csv_logs_checkpoints_queue_cancel(
    live: LiveServer, member: str, spec_file: Path
) -> None:
    job = as_json(run(live, "submit", str(spec_file), "--json", token=member))
    driver = live.driver(job["id"])
    driver.status("running")
    for step in (1, 2, 3):
        driver.loss(step, 3)
    driver.checkpoint(3)
    driver.log("a\nb\nc\n")

    rows = list(
        csv.reader(
            io.StringIO(
                run(live, "metrics", job["id"], "--name", "loss", "--csv", token=member).stdout
            )
        )
    )
    assert rows[0] == ["step", "name", "value", "time"]
    assert [r[0] for r in rows[1:]] == ["1", "2", "3"] and {r[1] for r in rows[1:]} == {"loss"}
    table = run(live, "metrics", job["id"], token=member)
    assert "learning_rate" in table.stdout and "loss" in table.stdout
    assert run(live, "logs", job["id"], "--tail", "4", token=member).stdout == "b\nc\n"
    assert run(live, "logs", job["id"], token=member).stdout == "a\nb\nc\n"
    [ckpt] = as_json(run(live, "checkpoints", job["id"], "--json", token=member))
    assert ckpt["step"] == 3 and ckpt["verified"] is True
    assert isinstance(as_json(run(live, "queue", "--json", token=member)), list)

    cancelled = as_json(run(live, "cancel", job["id"], "--json", token=member))
    assert cancelled["status"] in ("cancelling", "cancelled")
    watch = run(live, "watch", job["id"], "--poll", "0.2", token=member)
    assert watch.exit_code == 1 and "cancelled" in watch.stdout
    # A terminal job cannot be cancelled again into another state; a succeeded one is 409.
    done = as_json(run(live, "submit", str(spec_file), "--json", token=member))
    _drive(live, done["id"], steps=1, end="succeeded").join(60)
    conflict = run(live, "cancel", done["id"], token=member)
    assert conflict.exit_code == 5 and "409" in conflict.output


def test_stacks_prints_a_hung_attempts_dump(live: LiveServer, member: str, spec_file: Path) -> None:
    from service.health.rank_files import HealthFiles

    job = as_json(run(live, "submit", str(spec_file), "--json", token=member))
    files = HealthFiles(live.home / "storage")  # the service's default storage
    files.put_stacks(job_id=job["id"], attempt=1, text="== rank 0 ==\nThread 1: allreduce\n")
    out = run(live, "stacks", job["id"], "--attempt", "1", token=member)
    assert out.exit_code == 0 and out.stdout == "== rank 0 ==\nThread 1: allreduce\n"
    missing = run(live, "stacks", job["id"], "--attempt", "2", token=member)
    assert missing.exit_code != 0 and "did not hang" in missing.output


def test_admin_team_and_token_commands(live: LiveServer) -> None:
    team = _name("adm")
    created = as_json(run(live, "admin", "team", "create", team, "--quota-gpus", "2", "--json"))
    assert created["name"] == team and created["quota"]["max_gpus"] == 2
    assert team in {t["name"] for t in as_json(run(live, "admin", "team", "list", "--json"))}
    issued = as_json(
        run(
            live,
            "admin",
            "token",
            "create",
            "--team",
            team,
            "--role",
            "member",
            "--name",
            "robot",
            "--json",
        )
    )
    me = as_json(run(live, "whoami", "--json", token=issued["token"]))
    assert (me["team"], me["role"]) == (team, "member")
    human = run(live, "admin", "token", "create", "--team", team, "--name", "h")
    assert human.exit_code == 0 and "shown once" in human.stdout
    assert run(live, "admin", "token", "revoke", issued["id"]).exit_code == 0
    assert run(live, "whoami", token=issued["token"]).exit_code == 3


def test_root_level_options_and_env(live: LiveServer, member: str) -> None:
    runner = CliRunner()
    before = runner.invoke(app, ["--url", live.url, "--token", member, "--json", "whoami"])
    assert before.exit_code == 0, before.output
    assert json.loads(before.stdout)["role"] == "member"
    env = runner.invoke(
        app, ["whoami", "--json"], env={"SHUNTER_URL": live.url, "SHUNTER_TOKEN": member}
    )
    assert env.exit_code == 0 and json.loads(env.stdout)["role"] == "member"


def test_logs_follow_prints_new_lines_until_the_job_ends(
    live: LiveServer, member: str, spec_file: Path
) -> None:
    job = as_json(run(live, "submit", str(spec_file), "--json", token=member))
    driver = live.driver(job["id"])
    driver.status("running")
    driver.log("step 1\n")

    def more() -> None:
        for i in range(2, 5):
            time.sleep(0.3)
            driver.log(f"step {i}\n")
        driver.status("succeeded")

    writer = threading.Thread(target=more, daemon=True)
    writer.start()
    result = run(live, "logs", job["id"], "-f", token=member)
    writer.join(60)
    assert result.exit_code == 0, result.output
    assert result.stdout == "step 1\nstep 2\nstep 3\nstep 4\n"


def test_ray_status_shows_nodes_and_free_resources(live: LiveServer, member: str) -> None:
    data = as_json(run(live, "ray-status", "--json", token=member))
    node = data["nodes"][0]
    assert data["total_cpus"] > 0 and node["address"] == "127.0.0.1"
    shown = run(live, "ray-status", token=member)
    assert shown.exit_code == 0, shown.output
    assert "Ray cluster" in shown.stdout and node["address"] in shown.stdout
    assert f"{data['free_cpus']:g}/{data['total_cpus']:g}" in shown.stdout
    assert run(live, "ray-status", token="wrong-token").exit_code != 0
