"""bench/scheduler_scale.py at a tiny size, so it cannot rot (the figures: docs/scheduling.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_scale_bench_runs_small() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scheduler_scale.py"), "--small"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    ).stdout
    assert "identical: True" in out and "same decisions: True" in out
    assert "big:" in out and "decision per tick p50" in out
    assert "live (" in out and "split (median ms): snapshot" in out
