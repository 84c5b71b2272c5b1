"""``bench/mfu.py`` cannot rot: without CUDA it says it skipped; ``--smoke`` runs every CPU
variant (our FSDP2 engine and HF Trainer, pretrain and packed-SFT modes) on a tiny Llama."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "mfu.py"), *args],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_without_cuda_it_skips_cleanly() -> None:
    assert "skipped: no CUDA" in _bench()


@pytest.mark.skipif(torch.cuda.is_available(), reason="smoke is the CPU path")
@pytest.mark.parametrize("mode", ["pretrain", pytest.param("sft", marks=pytest.mark.slow)])
def test_smoke_runs_every_cpu_variant(mode: str) -> None:
    out = _bench("--smoke", "--mode", mode)
    assert "MFU denominator:" in out and "12 x L x H x seq" in out, out
    assert "fsdp2:" in out and "hf-trainer:" in out, out
    unit = "tokens/s" if mode == "pretrain" else "useful (labelled) tokens/s"
    assert unit in out and "x HF Trainer" in out, out
