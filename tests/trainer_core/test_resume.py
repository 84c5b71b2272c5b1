"""Exact resume and corrupt-checkpoint fallback.

A run of N steps straight is compared with a run that starts from the straight run's
checkpoint at N/2 in a NEW process: the per-step losses after the checkpoint must match to
1e-6 (same numbers; only a re-association of float sums could differ). Corrupting the newest
checkpoint (truncated shard, flipped byte, missing manifest) must make resume fall back to
the previous one, still exactly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tc_helpers import losses, run_module, tiny_llama_spec, write_corpus

from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.checkpoint import latest_verified

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOL = 1e-6


def _spec(out: Path, corpus: Path, strategy: str = "ddp") -> dict:
    # 6 steps, checkpoints at 3 and 6; dropout on so the RNG state matters to the losses.
    spec = tiny_llama_spec(
        out,
        corpus,
        strategy=strategy,
        max_steps=6,
        save_strategy="steps",
        save_steps=3,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
    )
    spec["model"]["config_overrides"]["attention_dropout"] = 0.1
    return spec


def _resume_copy(straight: Path, resumed: Path, step: int) -> None:
    resumed.mkdir(parents=True)
    shutil.copytree(straight / f"checkpoint-{step}", resumed / f"checkpoint-{step}")


def _assert_tail_matches(straight: Path, resumed: Path, first: int) -> None:
    a, b = losses(straight), losses(resumed)
    assert sorted(b) == list(range(first, 7)), sorted(b)
    for step in b:
        assert abs(a[step] - b[step]) < TOL, (step, a[step], b[step])


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("straight")
    corpus = write_corpus(root / "corpus.txt")
    out = root / "run"
    train(TrainConfig.from_spec(_spec(out, corpus)), JsonlReporter(out))
    return out, corpus


def test_resume_in_new_process_continues_exactly(
    straight: tuple[Path, Path], tmp_path: Path
) -> None:
    out, corpus = straight
    resumed = tmp_path / "resumed"
    _resume_copy(out, resumed, 3)
    stdout = run_module(_spec(resumed, corpus), tmp_path / "spec.json")
    assert '"step": 4' in stdout
    _assert_tail_matches(out, resumed, first=4)


def _truncate(ckpt: Path) -> None:
    shard = next(ckpt.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-100])


def _flip_byte(ckpt: Path) -> None:
    shard = next(ckpt.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


def _drop_manifest(ckpt: Path) -> None:
    (ckpt / "manifest.json").unlink()


@pytest.mark.parametrize("corrupt", [_truncate, _flip_byte, _drop_manifest])
def test_corrupt_newest_checkpoint_falls_back(
    straight: tuple[Path, Path], tmp_path: Path, corrupt, caplog: pytest.LogCaptureFixture
) -> None:
    out, corpus = straight
    run = tmp_path / "run"
    run.mkdir()
    for step in (3, 6):
        shutil.copytree(out / f"checkpoint-{step}", run / f"checkpoint-{step}")
    assert latest_verified(run) == run / "checkpoint-6"
    corrupt(run / "checkpoint-6")
    assert latest_verified(run) == run / "checkpoint-3"
    assert "skipping checkpoint" in caplog.text
    # Resume from the fallback really continues the straight run.
    result = train(TrainConfig.from_spec(_spec(run, corpus)), JsonlReporter(run))
    assert result.resumed_from == run / "checkpoint-3"
    _assert_tail_matches(out, run, first=4)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "deepspeed"])
def test_two_rank_resume_is_exact(strategy: str, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "straight"
    run_module(_spec(out, corpus, strategy), tmp_path / "a.json", nproc=2)
    resumed = tmp_path / "resumed"
    _resume_copy(out, resumed, 3)
    run_module(_spec(resumed, corpus, strategy), tmp_path / "b.json", nproc=2)
    _assert_tail_matches(out, resumed, first=4)
