"""The loop end to end per task: eval metrics, best-model tracking, early stopping, pruning,
the final model reloading with the task's AutoModel class, and the JSONL reporter."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
from tc_helpers import MINILM, tiny_llama_spec, write_corpus

from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.model import model_class

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "max_position_embeddings": 64,
}


def test_early_stopping_best_checkpoint_and_pruning(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.txt")
    out = tmp_path / "run"
    # lr 1e-12 (the spec wants lr > 0): Adam's steps (~lr) are far below float32's resolution
    # at these weights, so the eval loss never improves after the first eval and patience 2
    # stops at step 3.
    spec = tiny_llama_spec(
        out,
        corpus,
        max_steps=10,
        learning_rate=1e-12,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
        save_total_limit=1,
        early_stopping_patience=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
    )
    spec["data"]["eval"] = {"path": str(corpus)}
    result = train(TrainConfig.from_spec(spec), JsonlReporter(out))
    assert result.stopped_early and result.global_step == 3
    assert result.best_checkpoint == out / "checkpoint-1"
    # save_total_limit 1 keeps the newest and the best.
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-3"]
    assert not list(out.glob(".tmp-checkpoint-*"))
    assert result.metrics["eval_perplexity"] == pytest.approx(math.exp(result.metrics["eval_loss"]))
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "checkpoint" in r] == [1, 2, 3]
    assert records[-1]["train_runtime_s"] > 0


@pytest.mark.parametrize("task", ["sequence-classification", "token-classification", "masked-lm"])
def test_bert_tasks_train_evaluate_and_reload(task: str, tmp_path: Path) -> None:
    words = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull"]
    rows = [
        {"text": " ".join(words[(i + j) % 8] for j in range(2 + i % 5)), "label": i % 2}
        for i in range(24)
    ]
    if task == "token-classification":
        rows = [
            {"text": r["text"].split(), "label": [j % 3 for j in range(len(r["text"].split()))]}
            for r in rows
        ]
    path = tmp_path / "d.parquet"
    pd.DataFrame(rows).to_parquet(path)
    out = tmp_path / "run"
    spec = {
        "model": {
            "tokenizer": MINILM,
            "task": task,
            "from_scratch": True,
            "config_overrides": dict(TINY_BERT),
        },
        "data": {"train": {"path": str(path)}, "eval": {"path": str(path)}, "max_length": 16},
        "training": {
            "output_dir": str(out),
            "num_train_epochs": 2,
            "per_device_train_batch_size": 8,
            "learning_rate": 1e-3,
            "eval_strategy": "epoch",
            "save_strategy": "epoch",
            "logging_steps": 1,
        },
    }
    if task != "masked-lm":
        spec["model"]["num_labels"] = 3 if task == "token-classification" else 2
        spec["data"]["label_field"] = "label"
    result = train(TrainConfig.from_spec(spec), JsonlReporter(out))
    assert result.global_step == 6  # 24 rows / 8 = 3 steps per epoch, 2 epochs
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    key = "eval_perplexity" if task == "masked-lm" else "eval_accuracy"
    assert key in result.metrics and math.isfinite(result.metrics["eval_loss"])
    model = model_class(task).from_pretrained(result.final_model_dir)
    assert type(model).__name__.startswith("Bert")
