"""A regression job and a seq2seq job through ``POST /v1/jobs`` on the real API and Ray:
both reach ``succeeded`` with their task's eval metrics, and the final models reload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import MINILM_DIR, ApiServer

pytestmark = pytest.mark.slow
WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull"]


def _spec(name: str, task: str, data: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "model": {
            "tokenizer": str(MINILM_DIR),
            "task": task,
            "from_scratch": True,
            "config_overrides": config,
        },
        "data": {"max_length": 32, **data},
        "training": {
            "max_steps": 6,
            "per_device_train_batch_size": 8,
            "learning_rate": 3e-3,
            "logging_steps": 1,
            "eval_strategy": "steps",
            "eval_steps": 3,
            "save_steps": 3,
        },
        "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
        "max_restarts": 0,
    }


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path.name


def test_regression_and_seq2seq_jobs_succeed(api: ApiServer) -> None:
    reg = _jsonl(
        api.data_root / "scores.jsonl",
        [
            {"text": " ".join(WORDS[(i + j) % 8] for j in range(3)), "score": i % 4 / 2}
            for i in range(32)
        ],
    )
    s2s = _jsonl(
        api.data_root / "pairs.jsonl",
        [
            {"src": " ".join(WORDS[(i + j) % 8] for j in range(4)), "tgt": WORDS[i % 8]}
            for i in range(32)
        ],
    )
    bert = {
        "model_type": "bert",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
    }
    t5 = {
        "model_type": "t5",
        "d_model": 32,
        "d_ff": 64,
        "d_kv": 16,
        "num_layers": 1,
        "num_decoder_layers": 1,
        "num_heads": 2,
    }
    jobs = {
        "regression": api.submit(
            _spec(
                "e2e-regression",
                "regression",
                {"train": reg, "eval": reg, "label_field": "score"},
                bert,
            )
        ),
        "seq2seq": api.submit(
            _spec(
                "e2e-seq2seq",
                "seq2seq",
                {"train": s2s, "eval": s2s, "text_field": "src", "target_field": "tgt"},
                t5,
            )
        ),
    }
    metric = {"regression": "eval_mse", "seq2seq": "eval_rouge_l"}
    for task, job_id in jobs.items():
        job = api.wait_done(job_id, timeout=400)
        assert job["status"] == "succeeded", (task, job["error"], api.events(job_id))
        assert job["progress"]["step"] == 6
        assert metric[task] in job["latest_metrics"], job["latest_metrics"]
        assert sorted(c["step"] for c in api.checkpoints(job_id)) == [3, 6]
        from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

        auto = AutoModelForSeq2SeqLM if task == "seq2seq" else AutoModelForSequenceClassification
        model = auto.from_pretrained(job["final_model_uri"])
        assert model.config.model_type == ("t5" if task == "seq2seq" else "bert")


def test_init_from_best_and_the_downloaded_model(api: ApiServer, tmp_path: Path) -> None:
    """A regression job keeps its best model; its download reproduces the job's own eval
    numbers; a second job started from its best checkpoint starts at that loss level."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from shunter.client import Client

    rows = [
        {"text": " ".join(WORDS[(i + j) % 8] for j in range(3)), "score": i % 4 / 2}
        for i in range(32)
    ]
    data = _jsonl(api.data_root / "best.jsonl", rows)
    bert = {
        "model_type": "bert",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
    }
    spec = _spec(
        "e2e-best", "regression", {"train": data, "eval": data, "label_field": "score"}, bert
    )
    spec["training"].update(
        eval_steps=2, save_steps=2, load_best_model_at_end=True, metric_for_best_model="mse"
    )
    source = api.submit(spec)
    job = api.wait_done(source, timeout=400)
    assert job["status"] == "succeeded", (job["error"], api.events(source))
    evals = api.metrics(source, "eval_mse")
    best = min(p["value"] for p in evals)
    first_loss = api.metrics(source, "loss")[0]["value"]

    token = api.api().headers["Authorization"].removeprefix("Bearer ")
    with Client(url=api.url, token=token) as client:
        folder = client.download_model(source, tmp_path / "dl", checkpoint="best")
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    batch = tok(
        [r["text"] for r in rows], padding=True, truncation=True, max_length=32, return_tensors="pt"
    )
    with torch.no_grad():
        pred = model(**batch).logits.reshape(-1)
    mse = float(((pred - torch.tensor([r["score"] for r in rows])) ** 2).mean())
    assert mse == pytest.approx(best, rel=1e-4, abs=1e-6), (mse, evals)

    child = _spec(
        "e2e-child", "regression", {"train": data, "eval": data, "label_field": "score"}, bert
    )
    child["model"]["init_from"] = {"job": source, "checkpoint": "best"}
    child["training"].update(max_steps=1, learning_rate=1e-7, eval_steps=1, save_steps=1)
    child_id = api.submit(child)
    done = api.wait_done(child_id, timeout=400)
    assert done["status"] == "succeeded", (done["error"], api.events(child_id))
    assert done["spec"]["model"]["init_from"]["path"].endswith(
        f"checkpoint-{min(evals, key=lambda p: p['value'])['step']}"
    )
    child_eval = api.metrics(child_id, "eval_mse")[0]["value"]
    assert child_eval == pytest.approx(best, rel=1e-3), (child_eval, best)
    assert api.metrics(child_id, "loss")[0]["value"] < first_loss - 0.2
