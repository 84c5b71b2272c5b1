"""Elastic jobs on a real local Ray (issue 30's "Elastic (live)" bar).

On the session head's 4 logical CPUs: a rigid 2-worker job holds 2 CPUs; an elastic DDP job
``{min: 2, max: 4}`` starts at 2 beside it; grows to 4 when that job ends (a checkpoint-now
stop and attempt 2 at 4 workers); shrinks to 2 instead of being preempted when a
higher-priority 2-worker job arrives (attempt 3 at 2). It succeeds with one loss point per
step, and its curve equals a fixed-width run's within 1e-4: the reference is the trainer's
own run in this process at 1 worker with the accumulation of the same global batch (the data
order gives each step the same rows at any width; ``tests/trainer_core/
test_elastic_resume.py`` holds that a run at 1 equals a fixed run at max).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ApiServer, tiny_llama_spec, wait_for

# By hand only (SHUNTER_E2E_ELASTIC=1): 3-11 min a run on a loaded 2-core machine and 9 of 10
# in a row there (the 10th waited past 180 s for Ray to start the 4-worker attempt), so it is
# not yet in CI; the loop's decisions are tested without Ray in
# tests/service/scheduler/test_loop_elastic.py.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("SHUNTER_E2E_ELASTIC") != "1",
        reason="the live elastic e2e runs by hand: SHUNTER_E2E_ELASTIC=1",
    ),
]

STEPS = int(os.environ.get("SHUNTER_E2E_ELASTIC_STEPS", "12"))
ACCUM = 3  # at max 4: 12 micro-batches a step at every width (6 at 2, 4 at 3, 3 at 4)
TOL = 1e-4
# One epoch holds every step (12 steps x 24 rows of 64 tokens < its ~1,250 rows): a resume's
# data position is then a whole number of batches at every width (trainer_core's rebase).
TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind. " * 4000
ELASTIC = {
    "data": {"train": {"path": "elastic.txt", "format": "text"}},
    "resources": {"num_workers": {"min": 2, "max": 4}, "cpus_per_worker": 1},
    "training": {"gradient_accumulation_steps": ACCUM, "save_steps": 1000},
}
RIGID = {"resources": {"num_workers": 2, "cpus_per_worker": 1}}


@pytest.fixture
def fast_api(tmp_path: Path, data_root: Path, ray_launcher: Any) -> Iterator[ApiServer]:
    """The e2e server with a short minimum runtime: resizes may come at once."""
    server = ApiServer(
        tmp_path / "home",
        data_root,
        ray_launcher,
        lease_seconds=60.0,
        max_infra_retries=2,
        preempt_min_runtime_s=2.0,
    ).start()
    try:
        yield server
    finally:
        server.stop_jobs()
        server.stop()


def _resized(api: ApiServer, job_id: str) -> list[str]:
    return [e["message"] for e in api.events(job_id) if e["type"] == "resized"]


def _widths(api: ApiServer, job_id: str) -> list[int]:
    r = api.api().get(f"/v1/jobs/{job_id}/attempts")
    assert r.status_code == 200, r.text
    return [int(a["num_workers"]) for a in r.json()["data"]]


def _has(api: ApiServer, job_id: str, prefix: str) -> bool:
    return any(m.startswith(prefix) for m in _resized(api, job_id))


def _reference(spec: dict[str, Any], data_root: Path, out: Path) -> list[float]:
    """The same spec as a rigid run on 1 worker holding the whole global batch (4 x ACCUM
    micro-batches a step), in this process: the fixed-width curve."""
    import torch

    from trainer_core import JsonlReporter, TrainConfig, train

    raw = json.loads(json.dumps(spec))
    raw["resources"] = {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1}
    raw["training"].update(gradient_accumulation_steps=4 * ACCUM, output_dir=str(out))
    raw["training"]["save_strategy"] = "no"
    raw["data"]["train"]["path"] = str(data_root / raw["data"]["train"]["path"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is ~10x faster than many
    try:
        with open(os.devnull, "w") as quiet:
            train(TrainConfig.from_spec(raw), JsonlReporter(out, stream=quiet))
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    by_step = {int(r["step"]): float(r["loss"]) for r in rows if "loss" in r}
    return [by_step[s] for s in sorted(by_step)]


def test_elastic_job_starts_narrow_grows_shrinks_and_keeps_the_curve(
    fast_api: ApiServer, data_root: Path, tmp_path: Path
) -> None:
    api = fast_api
    (data_root / "elastic.txt").write_text(TEXT)
    other = api.submit(tiny_llama_spec("e2e-other", steps=4, **RIGID))
    api.wait_status(other, {"running", "succeeded"}, timeout=120)
    spec = tiny_llama_spec("e2e-elastic", steps=STEPS, **ELASTIC)
    job = api.submit(spec)
    # 1. Starts at min beside the job that holds 2.
    wait_for(lambda: _resized(api, job), timeout=60, what=f"{job} to start")
    assert _resized(api, job)[0] == "start on 2 workers (min 2, max 4)"
    # 2. The other job ends: it grows to 4 at a checkpoint (attempt 2).
    assert api.wait_done(other, timeout=300)["status"] == "succeeded"
    wait_for(lambda: _has(api, job, "grow 2 -> 4"), timeout=60, what=f"{job} to grow")
    wait_for(
        lambda: any(p["attempt"] == 2 for p in api.metrics(job, "loss")),
        timeout=180,
        what=f"{job} to train at 4 workers",
    )
    assert _widths(api, job)[:2] == [2, 4], _resized(api, job)
    # 3. A higher class needs 2: it shrinks to 2 instead of being preempted (attempt 3). The
    # high job outlasts it (cancelled at the end), so it finishes at 2 without growing again.
    high = api.submit(tiny_llama_spec("e2e-high", steps=10_000, priority="high", **RIGID))
    wait_for(lambda: _has(api, job, "shrink 4 -> 2"), timeout=60, what=f"{job} to shrink")
    done = api.wait_done(job, timeout=400)
    assert done["status"] == "succeeded", (done["error"], api.events(job))
    assert api.job(high)["status"] in ("starting", "running")
    assert api.api().post(f"/v1/jobs/{high}/cancel").status_code == 200
    assert _widths(api, job) == [2, 4, 2], _resized(api, job)
    shrink = next(m for m in _resized(api, job) if m.startswith("shrink"))
    assert "instead of preemption (priority)" in shrink, shrink
    assert not any(e["type"] in ("attempt_lost", "failed") for e in api.events(job))
    # One loss point per step, each step once across the attempts, and the fixed curve.
    points = api.metrics(job, "loss")
    assert sorted(p["step"] for p in points) == list(range(1, STEPS + 1)), points
    got = [p["value"] for p in sorted(points, key=lambda p: p["step"])]
    want = _reference(spec, data_root, tmp_path / "reference")
    assert len(want) == STEPS
    worst = max(abs(g - w) for g, w in zip(got, want, strict=True))
    assert worst <= TOL, (worst, got, want)
