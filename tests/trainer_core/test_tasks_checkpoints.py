"""Checkpoints as users know them: ``save_strategy: best`` and ``model.init_from`` (weights
only: starts at the source's loss level with a fresh optimizer; ``resume: true``: the exact
continuation of the source run)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tc_helpers import losses, tiny_llama_spec, write_corpus

from trainer_core import JsonlReporter, TrainConfig, train

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _run(spec: dict[str, Any], out: Path) -> Any:
    return train(TrainConfig.from_spec(spec), JsonlReporter(out))


def test_save_strategy_best_saves_each_new_best_and_the_last(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.txt")
    out = tmp_path / "run"
    spec = tiny_llama_spec(
        out,
        corpus,
        max_steps=5,
        learning_rate=5e-2,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="best",
        load_best_model_at_end=True,
        metric_for_best_model="loss",
    )
    spec["data"]["eval"] = {"path": str(write_corpus(tmp_path / "e.txt", n=8))}
    result = _run(spec, out)
    evals = [
        (r["step"], r["eval_loss"])
        for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
        if "eval_loss" in r
    ]
    best, expected = float("inf"), set()
    for step, value in evals:
        if value < best:
            best, _ = value, expected.add(step)
    expected.add(5)  # the last step is always saved (a resume point)
    saved = {int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")}
    assert saved == expected, evals
    assert result.best_checkpoint == out / f"checkpoint-{max(s for s, v in evals if v == best)}"


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, Path, dict[int, float]]:
    corpus = write_corpus(tmp_path / "c.txt")
    out = tmp_path / "source"
    spec = tiny_llama_spec(
        out,
        corpus,
        max_steps=8,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        save_strategy="steps",
        save_steps=8,
    )
    _run(spec, out)
    return corpus, out / "checkpoint-8", losses(out)


def test_init_from_weights_starts_at_the_source_loss_level(
    tmp_path: Path, source: tuple[Path, Path, dict[int, float]]
) -> None:
    corpus, ckpt, src = source
    out = tmp_path / "b"
    spec = tiny_llama_spec(out, corpus, max_steps=2)
    spec["model"]["init_from"] = {"job": "job-a", "checkpoint": "latest", "path": str(ckpt)}
    result = _run(spec, out)
    mine = losses(out)
    assert result.global_step == 2 and sorted(mine) == [1, 2]  # a fresh run: steps from 1
    # From scratch the first loss is ~ln(vocab) = 10.3; from the checkpoint it is where the
    # source ended, not where it started. src[8] is measured before the source's 8th update
    # and checkpoint-8 holds the weights after it, so the new run starts at or below it.
    assert mine[1] < src[1] - 0.5, (mine, src)
    assert mine[1] < src[8] + 0.1, (mine, src)
    assert mine[1] < min(src[s] for s in range(1, 8)), (mine, src)


def test_init_from_resume_continues_the_source_run_exactly(
    tmp_path: Path, source: tuple[Path, Path, dict[int, float]]
) -> None:
    corpus, ckpt, _ = source
    straight = tmp_path / "straight"
    _run(
        tiny_llama_spec(
            straight, corpus, max_steps=10, learning_rate=1e-2, lr_scheduler_type="constant"
        ),
        straight,
    )
    out = tmp_path / "continued"
    spec = tiny_llama_spec(
        out, corpus, max_steps=10, learning_rate=1e-2, lr_scheduler_type="constant"
    )
    spec["model"]["init_from"] = {
        "job": "job-a",
        "checkpoint": 8,
        "resume": True,
        "path": str(ckpt),
    }
    _run(spec, out)
    cont, ref = losses(out), losses(straight)
    assert sorted(cont) == [9, 10]
    for step in cont:
        assert cont[step] == pytest.approx(ref[step], rel=1e-5), (cont, ref)
