"""``shunter admin team patch``, ``shunter admin usage`` and ``shunter admin sim`` end to end."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from live_server import LiveServer
from typer.testing import CliRunner, Result

from shunter.cli import app


def run(live: LiveServer, *args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--url", live.url, "--token", live.admin_token])


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_team_patch_and_usage(live: LiveServer) -> None:
    team = f"sched-{uuid.uuid4().hex[:6]}"
    as_json(run(live, "admin", "team", "create", team, "--quota-jobs", "1", "--json"))
    patched = as_json(
        run(
            live,
            "admin",
            "team",
            "patch",
            team,
            "--weight",
            "3",
            "--quota-gpus",
            "4",
            "--unlimited",
            "jobs",
            "--max-priority",
            "high",
            "--json",
        )
    )
    assert patched["weight"] == 3 and patched["max_priority"] == "high"
    assert patched["quota"] == {
        "max_gpus": 4,
        "max_cpus": None,
        "max_running_jobs": None,
        "max_gpus_by_type": None,
    }
    bad = run(live, "admin", "team", "patch", team, "--max-priority", "urgent")
    assert bad.exit_code != 0 and "max_priority" in bad.output
    rows = as_json(run(live, "admin", "usage", team, "--since", "2026-01-01T00:00:00Z", "--json"))
    assert rows == [
        {**rows[0], "team": team, "gpu_seconds": 0.0, "cpu_seconds": 0.0, "attempts": 0}
    ]
    table = run(live, "admin", "usage")
    assert table.exit_code == 0 and team in table.output


def test_admin_sim_writes_the_issue_format(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": [{"gpus": 2, "cpus": 16}]}))
    (tmp_path / "teams.json").write_text(json.dumps({"a": {"weight": 2}, "b": {"weight": 1}}))
    trace = [
        {
            "id": f"j{i}",
            "team": "ab"[i % 2],
            "submit_s": i * 10,
            "num_workers": 1,
            "gpus_per_worker": 1,
            "cpus_per_worker": 4,
            "duration_s": 300,
            "max_runtime_s": 600,
            "priority": "normal",
            "preemptible": True,
        }
        for i in range(6)
    ]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trace))
    args = [
        "admin",
        "sim",
        "--cluster",
        str(tmp_path / "cluster.json"),
        "--teams",
        str(tmp_path / "teams.json"),
        "--trace",
        str(tmp_path / "trace.jsonl"),
        "--out",
        str(tmp_path / "out.json"),
        "--policy",
        "fair",
        "--policy",
        "fifo",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "out.json").read_text())
    assert set(out["jobs"][0]) >= {"id", "runs", "preemptions", "estimated_start_s"}
    assert set(out["policies"]) == {"fair", "fifo"}
    assert set(out["summary"]["teams"]["a"]) >= {"gpu_s", "mean_wait_s", "p95_wait_s"}
    assert "jain_index" in out["summary"]
    bad = CliRunner().invoke(app, [*args[:-1], "lottery"])
    assert bad.exit_code == 2 and "unknown 'lottery'" in bad.output


def test_queue_and_show_render_etas() -> None:
    from datetime import UTC, datetime, timedelta

    from rich.console import Console

    from shunter.cli.render import eta_text, queue_table
    from shunter.client.responses import QueueEntry

    soon = datetime.now(UTC) + timedelta(minutes=30)
    assert eta_text(None) == "unknown" and "(in 30 min)" in eta_text(soon)
    console = Console(width=200, record=True)
    console.print(queue_table([QueueEntry(id="job-1", position=1, estimated_start_at=soon)]))
    text = console.export_text()  # export clears the record: read it once
    assert "STARTS" in text and "in 30 min" in text


def test_team_budget_patch_and_usage(live: LiveServer) -> None:
    team = f"budget-{uuid.uuid4().hex[:6]}"
    as_json(run(live, "admin", "team", "create", team, "--json"))
    args = ["--budget-cpu-hours", "5", "--budget-period", "week", "--budget-mode", "soft"]
    patched = as_json(run(live, "admin", "team", "patch", team, *args, "--json"))
    assert patched["budget"]["cpu_hours"] == 5 and patched["budget"]["mode"] == "soft"
    rows = as_json(run(live, "admin", "usage", team, "--json"))
    assert rows[0]["budget"]["cpu_hours_left"] == 5 and rows[0]["budget"]["period"] == "week"
    table = run(live, "admin", "usage", team)
    assert table.exit_code == 0 and "CPU-h 0.00/5" in table.output, table.output
    bad = run(live, "admin", "team", "patch", team, "--budget-gpu-hours", "1", "--budget-mode", "x")
    assert bad.exit_code == 2 and "budget.mode" in bad.output
    cleared = as_json(run(live, "admin", "team", "patch", team, "--no-budget", "--json"))
    assert cleared["budget"] is None


def test_queue_table_marks_a_stale_eta() -> None:
    from datetime import UTC, datetime, timedelta

    from rich.console import Console

    from shunter.cli.render import queue_table
    from shunter.client.responses import QueueEntry

    soon = datetime.now(UTC) + timedelta(minutes=30)
    console = Console(width=200, record=True)
    rows = [
        QueueEntry(id="job-1", position=1, estimated_start_at=soon),
        QueueEntry(id="job-2", position=2, estimated_start_at=soon, estimate_stale=True),
    ]
    console.print(queue_table(rows))
    lines = console.export_text().splitlines()
    assert "(stale)" not in next(x for x in lines if "job-1" in x)
    assert "(stale)" in next(x for x in lines if "job-2" in x)
