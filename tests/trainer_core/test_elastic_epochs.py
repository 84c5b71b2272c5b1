"""Elastic resumes past an epoch end (issue 30; ``trainer_core.row_order``): a 62-row corpus
(not a multiple of the 8-row global batch), per-device batch 2, ``{min: 1, max: 2}`` with
accumulation 2 at 2 workers (4 at 1). Step 8 holds epoch 0's last 6 rows and epoch 1's
first 2 at both widths; a checkpoint after it resumes at exactly the next row.

In-process (fast): the width-1 run resumed from its checkpoint past the epoch end gives the
fixed run's losses exactly (==). The resizes across widths (2 gloo ranks, slow):
``test_elastic_epochs_slow.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from shunter.jobspec import JobSpec
from shunter.jobspec.elastic import at_width
from tests.trainer_core.test_strategies_harness import TrainJob, run_train_job
from tests.trainer_core.test_strategies_train import _WORDS, _losses, _spec

MAX, ROWS, STEPS = 2, 62, 12


def _corpus(path: Path) -> Path:
    lines = [
        " ".join(_WORDS[(i * 3 + j) % len(_WORDS)] for j in range(2 + (i * 7) % 14))
        for i in range(ROWS)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _at(out: Path, corpus: Path, width: int) -> dict[str, object]:
    raw = _spec(out, corpus, {"strategy": "ddp"}, per_device=2)
    raw["name"] = "elastic-epochs"
    raw["resources"] = {"num_workers": {"min": 1, "max": MAX}, "gpus_per_worker": 0}
    raw["training"].update(max_steps=STEPS, save_steps=5)
    spec = at_width(JobSpec.model_validate(raw), width)
    assert spec.training.gradient_accumulation_steps == 2 * MAX // width
    return spec.model_dump(mode="json")


def _resume_in(out: Path, checkpoint: Path, corpus: Path, width: int) -> dict[str, object]:
    out.mkdir()
    shutil.copytree(checkpoint, out / checkpoint.name)
    return _at(out, corpus, width)


def test_a_resume_past_an_epoch_end_is_exact(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.txt")
    cpu = torch.device("cpu")
    run_train_job(TrainJob(name="fixed", spec=_at(tmp_path / "fixed", corpus, 1)), cpu)
    again = _resume_in(tmp_path / "again", tmp_path / "fixed" / "checkpoint-10", corpus, 1)
    result = run_train_job(TrainJob(name="again", spec=again), cpu)
    assert result["resumed_from"].endswith("checkpoint-10")
    fixed = _losses(tmp_path / "fixed")
    assert len(fixed) == STEPS
    assert _losses(tmp_path / "again") == fixed[10:]
