"""seq2seq, regression, multi-label classification and extractive QA: each task's metric
as a pure function, its encoding, and a short in-process run (loss falls, eval metrics
reported, the final model reloads with the task's AutoModel class)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from tc_helpers import MINILM
from transformers import AutoTokenizer

from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.model import model_class
from trainer_core.tasks.multilabel import micro_f1
from trainer_core.tasks.qa import answer_span, span_f1
from trainer_core.tasks.seq2seq import rouge_l

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "max_position_embeddings": 64,
}
TINY_T5 = {
    "model_type": "t5",
    "d_model": 32,
    "d_ff": 64,
    "d_kv": 16,
    "num_layers": 1,
    "num_decoder_layers": 1,
    "num_heads": 2,
}
WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull"]


def test_metric_functions() -> None:
    assert rouge_l([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert rouge_l([1, 9, 3], [1, 2, 3]) == pytest.approx(2 / 3)  # LCS 2 of 3 and 3
    assert rouge_l([5, 6], [1, 2, 3]) == 0.0
    assert rouge_l([1, 2], [1, 3, 2, 4]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert micro_f1(tp=3, fp=1, fn=1) == pytest.approx(0.75)
    assert micro_f1(tp=0, fp=0, fn=0) == 1.0
    assert span_f1((2, 4), (2, 4)) == 1.0
    assert span_f1((2, 3), (3, 6)) == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    assert span_f1((0, 1), (3, 4)) == 0.0


def test_answer_span_maps_characters_to_context_tokens() -> None:
    tok = AutoTokenizer.from_pretrained(MINILM)
    context = "the cat sat on the mat today"
    enc = tok("where", context, return_offsets_mapping=True)
    start = context.index("the mat")
    s, e = answer_span(enc["offset_mapping"], enc.sequence_ids(0), start, start + len("the mat"))
    assert tok.decode(enc["input_ids"][s : e + 1]) == "the mat"
    short = tok(
        "where", context, return_offsets_mapping=True, truncation="only_second", max_length=6
    )
    assert answer_span(short["offset_mapping"], short.sequence_ids(0), start, start + 7) == (0, 0)


def _run(
    tmp_path: Path,
    task: str,
    rows: list[dict[str, Any]],
    model: dict[str, Any],
    data: dict[str, Any],
    epochs: int = 3,
) -> tuple[Any, list[float]]:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "run"
    spec = {
        "model": {"tokenizer": MINILM, "task": task, "from_scratch": True, **model},
        "data": {
            "train": {"path": str(path)},
            "eval": {"path": str(path)},
            "max_length": 32,
            "label_field": None,
            **data,
        },
        "training": {
            "output_dir": str(out),
            "num_train_epochs": epochs,
            "per_device_train_batch_size": 8,
            "learning_rate": 3e-3,
            "eval_strategy": "epoch",
            "save_strategy": "no",
            "logging_steps": 1,
            "seed": 1,
        },
    }
    result = train(TrainConfig.from_spec(spec), JsonlReporter(out))
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return result, [r["loss"] for r in records if "loss" in r]


def test_regression_learns_a_score(tmp_path: Path) -> None:
    rows = [
        {"text": " ".join(WORDS[(i + j) % 8] for j in range(3)), "score": float(i % 4)}
        for i in range(32)
    ]
    result, losses = _run(
        tmp_path,
        "regression",
        rows,
        {"config_overrides": dict(TINY_BERT)},
        {"label_field": "score"},
        epochs=4,
    )
    # An untrained head predicts ~0: MSE ~3.5 (mean of 0, 1, 4, 9); the mean alone gives 1.25.
    assert sum(losses[-4:]) < sum(losses[:4]) * 0.7, losses
    assert result.metrics["eval_mse"] < 2.5
    assert result.metrics["eval_mse"] == pytest.approx(result.metrics["eval_loss"])
    assert result.metrics["eval_mae"] > 0 and math.isfinite(result.metrics["eval_mse"])
    model = model_class("regression").from_pretrained(result.final_model_dir)
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"


def test_multi_label_reports_micro_f1(tmp_path: Path) -> None:
    rows = [
        {
            "text": " ".join(WORDS[(i + j) % 8] for j in range(3)),
            "tags": [k for k in range(3) if (i >> k) & 1],
        }
        for i in range(32)
    ]
    result, losses = _run(
        tmp_path,
        "multi-label-classification",
        rows,
        {"config_overrides": dict(TINY_BERT), "num_labels": 3},
        {"label_field": "tags"},
    )
    assert losses[-1] < losses[0], losses
    assert 0.0 <= result.metrics["eval_micro_f1"] <= 1.0
    model = model_class("multi-label-classification").from_pretrained(result.final_model_dir)
    assert model.config.problem_type == "multi_label_classification"


def test_seq2seq_trains_a_t5_from_config(tmp_path: Path) -> None:
    rows = [
        {
            "src": " ".join(WORDS[(i + j) % 8] for j in range(4)),
            "tgt": " ".join(WORDS[(i + j) % 8] for j in range(2)),
        }
        for i in range(32)
    ]
    result, losses = _run(
        tmp_path,
        "seq2seq",
        rows,
        {"config_overrides": dict(TINY_T5)},
        {"text_field": "src", "target_field": "tgt"},
        epochs=4,
    )
    assert losses[-1] < losses[0] - 1.0, losses
    assert 0.0 <= result.metrics["eval_rouge_l"] <= 1.0 and result.metrics["eval_rouge_l"] > 0
    model = model_class("seq2seq").from_pretrained(result.final_model_dir)
    assert model.config.model_type == "t5"


def test_question_answering_finds_spans(tmp_path: Path) -> None:
    rows = []
    for i in range(32):
        answer = WORDS[i % 8]
        context = f"the answer is {answer} and nothing else"
        rows.append(
            {
                "question": "what is it",
                "context": context,
                "answers": {"text": [answer], "answer_start": [context.index(answer)]},
            }
        )
    result, losses = _run(
        tmp_path,
        "question-answering",
        rows,
        {"config_overrides": dict(TINY_BERT)},
        {"text_field": "question", "text_pair_field": "context", "label_field": "answers"},
        epochs=4,
    )
    assert losses[-1] < losses[0], losses
    # The answer is always the 4th context word: a tiny model learns the position.
    assert result.metrics["eval_exact_match"] > 0.5 and result.metrics["eval_f1"] > 0.5
    model = model_class("question-answering").from_pretrained(result.final_model_dir)
    assert type(model).__name__ == "BertForQuestionAnswering"
    pd.DataFrame(rows)  # the rows are plain columns (parquet-able)
