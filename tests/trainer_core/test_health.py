"""The divergence guard (``trainer_core.health``): the detector on CPU, a skipped step that
leaves parameters and optimizer state untouched, and a run at lr 10 with plain SGD and no
clipping that rolls back and then fails as diverged long before its step budget."""

from __future__ import annotations

import math
import os
import pickle
from pathlib import Path

import pytest
import torch
from tc_helpers import tiny_llama_spec, write_corpus
from torch import nn

from shunter.jobspec.spec import DivergenceSpec
from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.health import Diverged, DivergenceGuard
from trainer_core.parallel import ParallelConfig, build_engine, init_distributed
from worker.classify import classify

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _warm(guard: DivergenceGuard, n: int = 20, loss: float = 2.0) -> None:
    for i in range(n):
        assert not guard.judge(False, loss + 0.05 * (i % 3), 1.0).skip


def test_non_finite_loss_or_norm_is_skipped_at_once() -> None:
    guard = DivergenceGuard(DivergenceSpec())
    assert guard.judge(False, math.nan, 1.0).reason == "non-finite loss"
    assert guard.judge(False, 1.0, math.inf).reason == "non-finite grad norm"
    assert guard.judge(True, 1.0, 1.0).reason == "another rank saw a non-finite value"
    assert guard.last_finite_loss == 1.0  # the finite losses of skipped steps still count


def test_spike_needs_history_and_a_z_score_above_the_bound() -> None:
    guard = DivergenceGuard(DivergenceSpec(spike_zscore=6.0, spike_window=50))
    assert not guard.judge(False, 1000.0, 1.0).skip  # no history: no spike check yet
    guard = DivergenceGuard(DivergenceSpec(spike_zscore=6.0, spike_window=50))
    _warm(guard)
    assert math.isfinite(guard.threshold())
    assert not guard.judge(False, 2.2, 1.0).skip  # within the noise
    assert guard.judge(False, 20.0, 1.0).reason == "loss spike"
    assert not guard.judge(False, 0.5, 1.0).skip  # a drop is never a spike
    off = DivergenceGuard(DivergenceSpec(spike_zscore=0))
    _warm(off)
    assert off.threshold() == math.inf and not off.judge(False, 1e6, 1.0).skip


def test_rollback_is_due_after_max_skips_inside_the_window() -> None:
    guard = DivergenceGuard(DivergenceSpec(max_skips=3, skip_window=10))
    for step in (1, 5):
        guard.record_skip(step)
    assert not guard.rollback_due(5)
    guard.record_skip(20)  # 1 and 5 fell out of the window (20 - 10)
    assert not guard.rollback_due(20)
    guard.record_skip(21)
    guard.record_skip(22)
    assert guard.rollback_due(22)
    guard.after_rollback()
    assert not guard.rollback_due(22) and len(guard.history) == 0


def test_check_reads_device_tensors_once_and_agrees_the_flag() -> None:
    seen: list[torch.Tensor] = []

    def reduce(t: torch.Tensor) -> torch.Tensor:  # as another rank had seen an inf
        seen.append(t)
        return t + 1

    guard = DivergenceGuard(DivergenceSpec(), reduce)
    v = guard.check(torch.tensor(1.5), torch.tensor(0.5))
    assert v.skip and v.reason == "another rank saw a non-finite value" and len(seen) == 1
    ok = DivergenceGuard(DivergenceSpec()).check(torch.tensor(1.5), torch.tensor(0.5))
    assert not ok.skip and ok.loss == 1.5 and ok.grad_norm == 0.5


def test_a_skipped_step_leaves_params_and_optimizer_state_untouched() -> None:
    info = init_distributed(use_cuda=False)
    torch.manual_seed(0)
    engine = build_engine(
        nn.Linear(4, 1),
        ParallelConfig(),
        make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=0.1),
        device=info.device,
    )
    x = torch.randn(8, 4)
    engine.backward(engine.forward(input=x).pow(2).sum())
    engine.clip_and_step(1.0)  # one real step: AdamW state exists
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    moments = {k: v.clone() for k, v in engine.optimizer.state_dict()["state"][0].items()}
    guard = DivergenceGuard(DivergenceSpec())
    _warm(guard)
    engine.backward(engine.forward(input=x * 1000).pow(2).sum())  # a huge loss: a spike
    loss = torch.tensor(50.0)
    norm = engine.clip_and_step(1.0, skip=guard.gate(loss))
    assert guard.last is not None and guard.last.reason == "loss spike" and norm > 0
    for k, v in engine.model.state_dict().items():
        assert torch.equal(v, before[k]), k
    for k, v in engine.optimizer.state_dict()["state"][0].items():
        assert torch.equal(v, moments[k]), k
    assert all(p.grad is None for p in engine.model.parameters())  # dropped, not carried


def _diverging(out: Path, corpus: Path) -> dict:
    spec = tiny_llama_spec(
        out,
        corpus,
        max_steps=400,
        optim="sgd",
        learning_rate=10.0,
        max_grad_norm=0.0,
        lr_scheduler_type="constant",
        save_strategy="steps",
        save_steps=2,
    )
    spec["health"] = {"divergence": {"max_skips": 2, "skip_window": 20, "max_rollbacks": 2}}
    return spec


def test_lr_10_sgd_without_clipping_rolls_back_then_fails_as_diverged(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "run"
    reporter = JsonlReporter(out, stream=open(os.devnull, "w"))  # noqa: SIM115
    with pytest.raises(Diverged) as caught:
        train(TrainConfig.from_spec(_diverging(out, corpus)), reporter)
    err = caught.value
    assert err.rollbacks == 2 and err.step < 100  # well before max_steps (400)
    assert err.last_finite_loss is not None and math.isfinite(err.last_finite_loss)
    rollbacks = [r for r in reporter.records if "health_rollbacks" in r]
    assert [r["health_rollbacks"] for r in rollbacks] == [1.0, 2.0]
    assert all(r["health_rollback_to_step"] < r["step"] for r in rollbacks)
    assert [r["health_seed"] for r in rollbacks] == [8.0, 9.0]  # seed 7 + rollbacks
    skips = [r for r in reporter.records if "health_skipped_steps" in r]
    assert len(skips) >= 6  # 2 skips before each of 2 rollbacks and the final give-up
    again = pickle.loads(pickle.dumps(err))  # Ray ships it to the driver pickled
    assert (again.step, again.rollbacks, str(again)) == (err.step, err.rollbacks, str(err))
    info = classify(err)
    assert info.type == "diverged" and f"step {err.step}" in info.message
