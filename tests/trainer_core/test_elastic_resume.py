"""Elastic resizes through the real loop (issue 30, item 2; ``shunter.jobspec.elastic``):
the same tiny-Llama causal-LM spec at max 2 workers (accumulation 2) and at 1 (accumulation
re-derived: 4), same per-device batch, so every step takes the same 8 rows. A run that
resizes at a checkpoint (1 -> 2 ranks: grow; 2 -> 1: shrink; DDP, DCP shards) must give the
fixed 2-worker run's loss at every step to 1e-4, and so must a whole run at 1. Without the
loop's rebase of the data position (``trainer_core.loop._rebase``) the resumed steps read
other rows and differ."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from shunter.jobspec import JobSpec
from shunter.jobspec.elastic import at_width
from tests.trainer_core.test_strategies_harness import TrainJob, run_train_job, spawn
from tests.trainer_core.test_strategies_train import TOL, _corpus, _losses, _spec

MAX = 2


def _at(out: Path, corpus: Path, width: int) -> dict[str, object]:
    raw = _spec(out, corpus, {"strategy": "ddp"}, per_device=2)
    raw["name"] = "elastic"
    raw["resources"] = {"num_workers": {"min": 1, "max": MAX}, "gpus_per_worker": 0}
    spec = at_width(JobSpec.model_validate(raw), width)
    assert spec.training.gradient_accumulation_steps == 2 * MAX // width
    return spec.model_dump(mode="json")


def _resume_in(out: Path, checkpoint: Path, corpus: Path, width: int) -> dict[str, object]:
    out.mkdir()
    shutil.copytree(checkpoint, out / checkpoint.name)
    return _at(out, corpus, width)


def _close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= TOL for g, w in zip(got, want, strict=True))


@pytest.mark.slow
def test_resizes_keep_the_fixed_width_loss_curve(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.txt")
    cpu = torch.device("cpu")
    narrow = _at(tmp_path / "at-1", corpus, 1)
    run_train_job(TrainJob(name="at-1", spec=narrow), cpu)
    grow = _resume_in(tmp_path / "grow", tmp_path / "at-1" / "checkpoint-2", corpus, 2)
    spawn(
        2,
        [
            TrainJob(name="fixed", spec=_at(tmp_path / "fixed", corpus, 2)),
            TrainJob(name="grow", spec=grow),
        ],
        tmp_path,
    )
    shrink = _resume_in(tmp_path / "shrink", tmp_path / "fixed" / "checkpoint-2", corpus, 1)
    result = run_train_job(TrainJob(name="shrink", spec=shrink), cpu)
    assert result["resumed_from"].endswith("checkpoint-2")
    fixed = _losses(tmp_path / "fixed")
    assert len(fixed) == 4
    assert _close(_losses(tmp_path / "at-1"), fixed), (_losses(tmp_path / "at-1"), fixed)
    assert _close(_losses(tmp_path / "grow"), fixed[2:]), (_losses(tmp_path / "grow"), fixed)
    assert _close(_losses(tmp_path / "shrink"), fixed[2:]), (_losses(tmp_path / "shrink"), fixed)
