"""``shunter sweep submit|show|watch|cancel|list`` against a live server (in-memory launcher,
real scheduler and sweep controller); the trials are driven as a Ray driver would."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from live_server import LiveServer, valid_spec
from typer.testing import CliRunner, Result

from shunter.cli import app


def run(live: LiveServer, *args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--url", live.url, "--token", live.admin_token])


def _body(**overrides: Any) -> dict[str, Any]:
    base = valid_spec("cli-sweep", eval_strategy="steps", eval_steps=1)
    base["data"]["eval"] = {"path": "train.tsv", "format": "csv", "delimiter": "\t"}
    body = {
        "name": "cli",
        "base": base,
        "space": {
            "training.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True}
        },
        "objective": "accuracy",
        "direction": "maximize",
        "max_trials": 2,
        "max_parallel": 2,
        "sampler": "random",
    }
    return {**body, **overrides}


def _file(tmp_path: Path, body: dict[str, Any], name: str = "sweep.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


def _trials(live: LiveServer, sweep_id: str, n: int) -> list[Any]:
    deadline = time.monotonic() + 30
    with live.client() as c:
        while time.monotonic() < deadline:
            trials = c.sweep(sweep_id).trials
            if len(trials) >= n:
                return trials
            time.sleep(0.05)
    raise AssertionError(f"sweep {sweep_id} never sampled {n} trials")


def test_sweep_submit_watch_show_list(live: LiveServer, tmp_path: Path) -> None:
    bad = _body(space={"resources.num_workers": {"type": "int", "low": 0, "high": 4}})
    r = run(live, "sweep", "submit", _file(tmp_path, bad, "bad.json"))
    assert r.exit_code == 2 and "space.resources.num_workers" in r.output, r.output
    local = run(live, "sweep", "submit", _file(tmp_path, _body(sampler="anneal"), "l.json"))
    assert local.exit_code == 2 and "sampler" in local.output  # refused before any request
    r = run(live, "sweep", "submit", _file(tmp_path, _body()), "--json")
    assert r.exit_code == 0, r.output
    sweep_id = json.loads(r.stdout)["id"]
    for t in _trials(live, sweep_id, 2):
        driver = live.driver(t.job_id)
        driver.status("running")
        acc = 0.6 + 0.2 * t.number
        point = {"step": 1, "name": "eval_accuracy", "value": acc}
        driver.metrics([point], step=1, total=1)
        driver.status("succeeded")
    watched = run(live, "sweep", "watch", sweep_id, "--poll", "0.1", "--json")
    assert watched.exit_code == 0, watched.output
    got = json.loads(watched.stdout)
    assert got["status"] == "succeeded" and got["best_trial"]["number"] == 1
    assert got["best_trial"]["objective"] == 0.8
    shown = run(live, "sweep", "show", sweep_id)
    assert shown.exit_code == 0 and "best: trial 1" in shown.output and "download" in shown.output
    as_json = json.loads(run(live, "sweep", "show", sweep_id, "--json").stdout)
    assert [t["status"] for t in as_json["trials"]] == ["succeeded", "succeeded"]
    listed = run(live, "sweep", "list")
    assert listed.exit_code == 0 and "#1 0.8" in listed.output
    assert sweep_id in [s["id"] for s in json.loads(run(live, "sweep", "list", "--json").stdout)]


def test_sweep_cancel_cancels_trials(live: LiveServer, tmp_path: Path) -> None:
    r = run(live, "sweep", "submit", _file(tmp_path, _body(max_trials=3)), "--json")
    sweep_id = json.loads(r.stdout)["id"]
    trials = _trials(live, sweep_id, 2)
    cancelled = run(live, "sweep", "cancel", sweep_id, "--json")
    assert cancelled.exit_code == 0, cancelled.output
    got = json.loads(cancelled.stdout)
    assert got["status"] == "cancelled"
    assert {t["status"] for t in got["trials"]} <= {"cancelled", "cancelling"}
    assert len(got["trials"]) == len(trials)
    assert run(live, "sweep", "watch", sweep_id, "--poll", "0.1").exit_code == 1
