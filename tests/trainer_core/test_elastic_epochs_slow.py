"""Elastic resizes past an epoch end across widths (issue 30; ``trainer_core.row_order``), on
``test_elastic_epochs``'s 62-row corpus, ``{min: 1, max: 2}``, 8-row steps: the fixed
2-worker run (2 gloo ranks), a shrink 2 -> 1 and a grow 1 -> 2 from step 10 (past epoch 0's
end, inside step 8) and the whole run at 1 give the fixed run's loss at every step to
``TOL`` (1e-4, as ``test_elastic_resume``: gloo's all-reduce sums in another order than one
process does). With each width's ``BatchOrder`` the widths read other rows from step 8 on
and the resumed attempts failed in ``_rebase``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer_core.test_elastic_epochs import STEPS, _at, _corpus, _resume_in
from tests.trainer_core.test_strategies_harness import TrainJob, run_train_job, spawn
from tests.trainer_core.test_strategies_train import TOL, _losses


def _close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= TOL for g, w in zip(got, want, strict=True))


@pytest.mark.slow
def test_resizes_past_an_epoch_end_keep_the_fixed_width_loss_curve(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.txt")
    cpu = torch.device("cpu")
    run_train_job(TrainJob(name="at-1", spec=_at(tmp_path / "at-1", corpus, 1)), cpu)
    grow = _resume_in(tmp_path / "grow", tmp_path / "at-1" / "checkpoint-10", corpus, 2)
    spawn(
        2,
        [
            TrainJob(name="fixed", spec=_at(tmp_path / "fixed", corpus, 2)),
            TrainJob(name="grow", spec=grow),
        ],
        tmp_path,
    )
    shrink = _resume_in(tmp_path / "shrink", tmp_path / "fixed" / "checkpoint-10", corpus, 1)
    result = run_train_job(TrainJob(name="shrink", spec=shrink), cpu)
    assert result["resumed_from"].endswith("checkpoint-10")
    fixed = _losses(tmp_path / "fixed")
    assert len(fixed) == STEPS
    assert _close(_losses(tmp_path / "at-1"), fixed), (_losses(tmp_path / "at-1"), fixed)
    assert _close(_losses(tmp_path / "grow"), fixed[10:]), (_losses(tmp_path / "grow"), fixed)
    assert _close(_losses(tmp_path / "shrink"), fixed[10:]), (_losses(tmp_path / "shrink"), fixed)
