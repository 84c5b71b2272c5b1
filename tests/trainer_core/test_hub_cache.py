"""Hub ids train from a locally seeded Hugging Face cache, with no network: a tiny BERT saved
in the hub cache layout as ``shunter-test/tiny-bert`` and a Parquet dataset repository
``shunter-test/tiny-sst2``; and the per-node lock makes a second worker wait for the first."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import datasets
import pytest
from tc_helpers import MINILM, REPO

REV = "0123456789abcdef0123456789abcdef01234567"


def _repo(hf_home: Path, kind: str, repo_id: str) -> Path:
    base = hf_home / "hub" / f"{kind}s--{repo_id.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(REV)
    snap = base / "snapshots" / REV
    snap.mkdir(parents=True)
    return snap


def seed_hf_cache(hf_home: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    model_dir = _repo(hf_home, "model", "shunter-test/tiny-bert")
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
        num_labels=2,
    )
    BertForSequenceClassification(config).save_pretrained(model_dir)
    for name in os.listdir(MINILM):  # MiniLM's WordPiece tokenizer files
        if name.startswith(("tokenizer", "vocab", "special_tokens")):
            shutil.copy(Path(MINILM) / name, model_dir / name)
    data_dir = _repo(hf_home, "dataset", "shunter-test/tiny-sst2") / "data"
    data_dir.mkdir()
    rows = [{"sentence": s, "label": i % 2} for i, s in enumerate(["bad", "good"] * 16)]
    datasets.Dataset.from_list(rows).to_parquet(str(data_dir / "train-00000-of-00001.parquet"))


def test_trains_from_hub_ids_in_a_seeded_cache(tmp_path: Path) -> None:
    hf_home = tmp_path / "hf"
    seed_hf_cache(hf_home)
    out = tmp_path / "out"
    spec = {
        "name": "hub",
        "model": {
            "name_or_path": "shunter-test/tiny-bert",
            "task": "sequence-classification",
            "num_labels": 2,
        },
        "data": {
            "train": {"hub": "shunter-test/tiny-sst2"},
            "text_field": "sentence",
            "label_field": "label",
            "max_length": 16,
        },
        "training": {
            "max_steps": 2,
            "per_device_train_batch_size": 4,
            "logging_steps": 1,
            "save_strategy": "no",
        },
        "resources": {"num_workers": 1, "gpus_per_worker": 0},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HF_DATASETS_CACHE", None)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer_core",
            "--spec",
            str(tmp_path / "spec.json"),
            "--output-dir",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2]
    assert (out / "final" / "config.json").is_file()


def test_a_missing_repo_is_an_error_naming_it(tmp_path: Path) -> None:
    code = (
        "from trainer_core.hub import snapshot\n"
        "snapshot('shunter-test/absent', repo_type='model')\n"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert run.returncode != 0
    assert "shunter-test/absent" in run.stderr or "cached snapshot" in run.stderr


def test_second_worker_waits_for_the_node_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from filelock import FileLock
    from huggingface_hub import constants

    import trainer_core.hub as hub

    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path))
    calls: list[float] = []
    monkeypatch.setattr(
        "huggingface_hub.snapshot_download",
        lambda repo_id, **kw: calls.append(time.monotonic()) or str(tmp_path / repo_id),
    )
    lock = tmp_path / "shunter-locks" / "models--org--m.lock"
    lock.parent.mkdir(parents=True)
    held = FileLock(str(lock))
    held.acquire()  # the first worker is downloading
    worker = threading.Thread(target=hub.snapshot, args=("org/m",), kwargs={"repo_type": "model"})
    released_at = time.monotonic() + 0.5
    worker.start()
    time.sleep(0.5)
    assert calls == []  # still waiting on the lock
    held.release()
    worker.join(timeout=10)
    assert len(calls) == 1 and calls[0] >= released_at
