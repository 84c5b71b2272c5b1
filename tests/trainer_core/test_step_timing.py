"""Per-rank step times (``trainer_core.step_timing``): the window arithmetic in one process,
and every rank's compute and wait times reported by rank 0 of a 2-process gloo run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tc_helpers import run_module, tiny_llama_spec, write_corpus

from shunter.jobspec.spec import StragglerSpec
from trainer_core.step_timing import StepTimer


def test_window_rounds_up_to_logging_steps_and_reports_once_per_window() -> None:
    timer = StepTimer(StragglerSpec(window_steps=5), logging_steps=2, device=torch.device("cpu"))
    assert timer.window == 6
    reported = []
    for step in range(1, 13):
        with timer.step():
            with timer.compute():
                sum(range(20_000))
            sum(range(20_000))  # outside compute: counts as wait
        if step % 2 == 0:
            logged = {"step_time_s": 0.5, "samples_per_s": 8.0, "tokens_per_s": 100.0}
            got = timer.window_end(logged)
            if got:
                reported.append(step)
                assert got["rank/0/compute_s"] > 0 and got["rank/0/wait_s"] > 0
                assert got["window/samples_per_s"] == pytest.approx(8.0)
                assert got["window/ranks"] == 1
                assert got["window/tokens_per_s"] == pytest.approx(100.0)
    assert reported == [6, 12]


def test_disabled_reports_nothing() -> None:
    timer = StepTimer(
        StragglerSpec(enabled=False, window_steps=1), logging_steps=1, device=torch.device("cpu")
    )
    with timer.step(), timer.compute():
        pass
    assert timer.window_end({"step_time_s": 1.0}) == {}


@pytest.mark.slow  # two torchrun processes (~30 s on 2 cores), as the other 2-rank tests
def test_every_rank_reports_compute_and_wait_on_gloo(tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = tiny_llama_spec(out, write_corpus(tmp_path / "train.txt"), max_steps=4)
    spec["health"] = {"straggler": {"window_steps": 2}}
    run_module(spec, tmp_path / "spec.json", nproc=2)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    windows = [r for r in records if "rank/0/compute_s" in r]
    assert [r["step"] for r in windows] == [2, 4]
    for r in windows:
        for rank in (0, 1):
            assert r[f"rank/{rank}/compute_s"] > 0
            assert r[f"rank/{rank}/wait_s"] > 0
        assert "rank/2/compute_s" not in r and r["window/ranks"] == 2
        assert r["window/samples_per_s"] > 0 and r["window/tokens_per_s"] > 0
