"""Training health through the real service and Ray (slow): a job at lr 10 with plain SGD and
no clipping fails as ``diverged`` after rollbacks that show as events and a metric series,
well before its step budget; and the embedded Ray head's temp dir is private (0700)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from harness import ApiServer, tiny_llama_spec

pytestmark = pytest.mark.slow


def test_ray_temp_dir_is_private(ray_launcher: Any) -> None:
    # Ray re-opens its own temp dir to 0777 whenever a driver starts (earlier tests ran jobs
    # on this head); the guard dir above it is ours, stays 0700, and keeps others out.
    temp_dir = Path(ray_launcher.head.temp_dir)
    guard = temp_dir.parent
    assert stat.S_IMODE(guard.stat().st_mode) == 0o700
    assert guard.stat().st_uid == os.getuid()
    assert (temp_dir / "session_latest").exists()  # Ray's sessions do live behind the guard


def test_lr_10_plain_sgd_fails_as_diverged_after_rollbacks(api: ApiServer) -> None:
    steps = 300
    spec = tiny_llama_spec(
        "e2e-diverge",
        steps=steps,
        training={
            "optim": "sgd",
            "learning_rate": 10.0,
            "max_grad_norm": 0.0,
            "lr_scheduler_type": "constant",
            "save_steps": 2,
            "logging_steps": 1,
        },
        health={"divergence": {"max_skips": 2, "skip_window": 20, "max_rollbacks": 2}},
        max_restarts=0,
    )
    job_id = api.submit(spec)
    job = api.wait_done(job_id, timeout=300)
    assert job["status"] == "failed", job
    assert job["error"]["type"] == "diverged", job["error"]
    assert "last finite loss" in job["error"]["message"]
    events = api.events(job_id)
    kinds = [e["type"] for e in events]
    assert kinds.count("rolled_back") == 2, kinds
    # Steps replayed after a rollback reuse their numbers, and a point (so its event) is stored
    # once per (attempt, step, name): a skip at a step already skipped before adds no event.
    assert kinds.count("step_skipped") >= 2, kinds
    points = api.pages(f"/v1/jobs/{job_id}/metrics", name="health_rollbacks")
    assert [p["value"] for p in points] == [1.0, 2.0]
    reached = max(p["step"] for p in api.pages(f"/v1/jobs/{job_id}/metrics"))
    assert reached < steps // 3, reached  # well before the step budget
