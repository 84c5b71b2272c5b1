"""Every ``bench/`` script runs end to end at a tiny size, so none rots unnoticed.

Each case runs the script as a user would (a subprocess from the repo root) with its
small-size flags and checks it exits 0 and prints its result table. The figures themselves
mean nothing at these sizes; the benches are for measuring, these tests for running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# script -> (tiny arguments, a string its output must contain)
FAST = {
    "scheduler.py": (["--jobs", "20", "--nodes", "1"], "fair"),
    "scheduler_contended.py": (["--traces", "1", "--hours", "1"], "trace"),
    "eta_calibration.py": (["--traces", "busy:0,bursty:0", "--hours", "1"], "ETAs now"),
    "elastic.py": (["--traces", "contended:1", "--hours", "1"], "wait ratio"),
    "strategies.py": (
        [
            "--strategies",
            "ddp",
            "--steps",
            "1",
            "--warmup",
            "0",
            "--hidden",
            "32",
            "--layers",
            "1",
            "--seq-len",
            "16",
            "--global-batch",
            "4",
        ],
        "ddp",
    ),
    "trainer_vs_hf.py": (
        [
            "--steps",
            "2",
            "--rounds",
            "1",
            "--batch-size",
            "4",
            "--max-length",
            "16",
            "--no-plain",
            "--threads",
            "1",
        ],
        "ours",
    ),
    "api_load.py": (
        [
            "--dbs",
            "sqlite",
            "--jobs",
            "20",
            "--clients",
            "2",
            "--seconds",
            "1",
            "--workers",
            "1",
            "--submit-clients",
            "1",
            "--submit-seconds",
            "1",
        ],
        "sqlite",
    ),
    "webhooks.py": (["--jobs", "3", "--backlog", "5", "--interval", "0.1"], "drain_per_s"),
    "webhook_backlog.py": (["--backlog", "20", "--receiver-ms", "1"], "ratio fifo/fair"),
    "replay_digest.py": (["--trace", "busy:0", "--hours", "1"], " etas "),
    "eta_idle.py": (["--trace", "mixed:5", "--hours", "2"], "idle while waiting"),
    "step_timing.py": (
        ["--steps", "20", "--rounds", "1", "--window", "10", "--hidden", "16", "--layers", "1"],
        "ratio timed/baseline",
    ),
}
# scripts whose smoke test lives beside the code it measures
ELSEWHERE = {
    "mfu.py": "tests/bench/test_mfu_smoke.py",
    "scheduler_scale.py": "tests/service/scheduler/test_bench_scale.py",
    "optimizers.py": "tests/trainer_core/test_optim_lowmem.py",
}
SLOW = {  # a Ray head and torchrun, a training step and an export, a moto S3: the slow set
    "checkpoint_export.py": (["--quick"], "export-checkpoint: wall"),
    "data_cache.py": (["--quick"], "ratio second/first"),
    "overhead.py": (["--steps", "3", "--repeat", "1"], "torchrun"),
    "resume_fetch.py": (["--quick", "--strategies", "fsdp"], "fetched MB"),
    # --burst 1: the burst path end to end (every line runs for one job as for N); each more
    # job adds a 1-process torchrun run to the timing and ~50 s to this test under load.
    "startup.py": (["--quick", "--burst", "1"], "jobs/min"),
    "storage_faults.py": (
        ["--mib", "1", "--sdk-attempts", "1", "--bound", "1"],
        "dead endpoint: StorageUnavailable",
    ),
    "streaming.py": (["--quick"], "losses equal at every step: yes"),
}


def _run(script: str, args: list[str], expect: str, timeout: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{out[-4000:]}"
    assert expect.lower() in out.lower(), f"{script} printed no {expect!r}:\n{out[-4000:]}"


# scripts that read ../shared/data (users never have it: skip cleanly without it)
NEEDS_SHARED = {"trainer_vs_hf.py": "sst2"}


@pytest.mark.parametrize("script", sorted(FAST))
def test_bench_runs_tiny(script: str) -> None:
    needs = NEEDS_SHARED.get(script)
    if needs and not (ROOT / ".." / "shared" / "data" / needs).is_dir():
        pytest.skip(f"{script} needs ../shared/data/{needs}")
    args, expect = FAST[script]
    _run(script, args, expect, timeout=180)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SLOW))
def test_bench_runs_tiny_slow(script: str) -> None:
    args, expect = SLOW[script]
    _run(script, args, expect, timeout=600)


def test_every_bench_script_has_a_smoke_test() -> None:
    scripts = {p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(FAST) | set(SLOW) | set(ELSEWHERE)
    for script, test in ELSEWHERE.items():
        assert script in (ROOT / test).read_text(), f"{test} does not run {script}"
