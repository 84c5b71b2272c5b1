"""A cordoned node (the straggler watch, ``service.health.straggler``) reaches Ray: the attempt's
``GET spec`` reply names it in ``avoid_nodes`` and the driver's Ray Train v2 ``ScalingConfig``
gets a label selector on Ray's built-in node-id label that keeps every worker off it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shunter.jobspec import JobSpec
from tests.service.svc_helpers import tiny_spec
from worker.driver import avoid_nodes_selector

ROOT = Path(__file__).resolve().parents[2]

ENV = {
    "SHUNTER_API_URL": "http://127.0.0.1:9",
    "SHUNTER_ATTEMPT_TOKEN": "t",
    "SHUNTER_JOB_ID": "job-1",
    "SHUNTER_ATTEMPT": "1",
}


def test_selector() -> None:
    assert avoid_nodes_selector(["n3", "n1", "", "n1"]) == {"ray.io/node-id": "!in(n1,n3)"}
    assert avoid_nodes_selector([]) is None


_PROBE = """
import json, sys
from worker.driver import build_trainer
payload, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps(build_trainer(payload, env).scaling_config.label_selector))
"""


def _selector(payload: dict[str, Any]) -> Any:
    """The trainer's label selector, built in a fresh process: Ray picks Train v1 or v2 when
    ``ray.train`` is first imported, and the launcher runs the driver with v2."""
    env = {**os.environ, "RAY_TRAIN_V2_ENABLED": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(payload), json.dumps(ENV)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_trainer_keeps_workers_off_cordoned_nodes(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    raw = tiny_spec()
    raw["training"]["output_dir"] = out
    spec = JobSpec.model_validate(raw).model_dump(mode="json")
    payload = {"spec": spec, "output_dir": out, "resume_from": None}
    assert _selector({**payload, "avoid_nodes": ["abc", "def"]}) == {
        "ray.io/node-id": "!in(abc,def)"
    }
    assert _selector({**payload, "avoid_nodes": []}) is None
