"""GET /v1/jobs/{id}/checkpoints/{step}/download: an intermediate checkpoint of a real (tiny,
in-process) job downloads as a model that loads with ``from_pretrained`` / PEFT and gives that
step's evaluation loss; consolidated once and cached beside the checkpoint, on a path or in
an S3 bucket; concurrent requests consolidate once."""

from __future__ import annotations

import io
import json
import os
import secrets
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from s3_server import S3Server, aws_env, running_s3
from svc_helpers import bearer, claim, internal, submit

import storage
from service.jobs import checkpoint_models
from service.jobs.checkpoint_models import CheckpointSource, cached_model, export_config
from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.data import load_tokenized
from trainer_core.evaluation import evaluate as _evaluate
from trainer_core.parallel.torch_engine import TorchEngine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "max_position_embeddings": 64,
}
TINY_LLAMA = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
WORDS = ["good", "bad", "fine", "awful", "great", "poor", "nice", "dull", "film", "plot"]
TRAINING = {
    "max_steps": 4,
    "per_device_train_batch_size": 8,
    "learning_rate": 1e-2,
    "eval_strategy": "steps",
    "eval_steps": 2,
    "save_strategy": "steps",
    "save_steps": 2,
    "logging_steps": 1,
    "seed": 1,
}
RESOURCES = {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1}


def regression_spec(data_root: Path) -> dict[str, Any]:
    rows = [
        {"text": " ".join(WORDS[(i + j) % 10] for j in range(3 + i % 4)), "score": float(i % 4)}
        for i in range(32)
    ]
    (data_root / "reg.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return {
        "name": "reg",
        "model": {
            "from_scratch": True,
            "task": "regression",
            "tokenizer": "models/all-MiniLM-L6-v2",
            "config_overrides": dict(TINY_BERT),
        },
        "data": {
            "train": {"path": "reg.jsonl"},
            "eval": {"path": "reg.jsonl"},
            "max_length": 32,
            "label_field": "score",
        },
        "training": dict(TRAINING),
        "resources": dict(RESOURCES),
    }


def lora_spec(data_root: Path) -> dict[str, Any]:
    """LoRA over a tiny 'pretrained' Llama that lives in the data root (a named base)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    base = data_root / "base-llama"
    config = AutoConfig.for_model("llama", vocab_size=30522, **TINY_LLAMA)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(base)
    lines = [" ".join(WORDS[(i + j) % 10] for j in range(3 + (i * 5) % 13)) for i in range(48)]
    (data_root / "corpus.txt").write_text("\n".join(lines) + "\n")
    return {
        "name": "lora",
        "model": {
            "name_or_path": "base-llama",
            "tokenizer": "models/all-MiniLM-L6-v2",
            "task": "causal-lm",
            "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        },
        "data": {"train": {"path": "corpus.txt"}, "eval": {"path": "corpus.txt"}, "max_length": 24},
        "training": {**TRAINING, "per_device_train_batch_size": 4},
        "resources": dict(RESOURCES),
    }


def run_job(client: Any, db: Any, token: str, spec: dict[str, Any], stage: Path) -> dict[str, Any]:
    """Submit through the API, claim, train in this process as the worker would (into the
    job's output dir, or node-local ``stage`` uploaded to the bucket), register checkpoints."""
    job_id = submit(client, token, spec)["id"]
    n, t = claim(db, job_id)
    got = client.get(internal(job_id, n, "spec"), headers=bearer(t)).json()
    out = got["output_dir"]
    local = stage if storage.is_remote(out) else Path(out)
    train(TrainConfig.from_spec(got["spec"], output_dir=local), JsonlReporter(local))
    for ckpt in sorted(local.glob("checkpoint-*")):
        uri = storage.join(out, ckpt.name)
        if storage.is_remote(out):
            storage.upload_dir(ckpt, uri)
        body = {"step": int(ckpt.name.split("-")[1]), "uri": uri, "bytes": 1, "verified": True}
        r = client.post(internal(job_id, n, "checkpoints"), json=body, headers=bearer(t))
        assert r.status_code == 200, r.text
    evals = {
        int(r["step"]): float(r["eval_loss"])
        for r in map(json.loads, (local / "metrics.jsonl").read_text().splitlines())
        if "eval_loss" in r
    }
    return {"id": job_id, "spec": got["spec"], "out": out, "evals": evals}


def download(client: Any, token: str, job_id: str, step: int, dest: Path) -> Path:
    r = client.get(f"/v1/jobs/{job_id}/checkpoints/{step}/download", headers=bearer(token))
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        tar.extractall(dest, filter="data")
    return dest / f"{job_id}-{step}"


def eval_loss(model: torch.nn.Module, folder: Path, spec: dict[str, Any], tmp: Path) -> float:
    """The trainer's own evaluation (``trainer_core.evaluation.evaluate``) of ``model`` on the
    job's eval set, tokenised with the downloaded tokenizer."""
    from transformers import AutoTokenizer

    cfg = TrainConfig.from_spec(spec, output_dir=tmp / "eval")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert cfg.data.eval is not None
    ds = load_tokenized(
        cfg.data.eval, cfg.data, task=cfg.model.task, tokenizer=tokenizer, cache_root=tmp / "tok"
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    engine = TorchEngine(model=model, unwrapped=model, optimizer=opt, device=torch.device("cpu"))
    return _evaluate(engine, ds, cfg, tokenizer)["eval_loss"]


def test_regression_checkpoint_downloads_as_the_model_at_that_step(
    client: Any, db: Any, admin_token: str, data_root: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForSequenceClassification

    job = run_job(client, db, admin_token, regression_spec(data_root), tmp_path / "stage")
    assert set(job["evals"]) == {2, 4} and abs(job["evals"][2] - job["evals"][4]) > 1e-3
    folder = download(client, admin_token, job["id"], 2, tmp_path / "dl")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in folder.iterdir()
    }
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    assert model.config.problem_type == "regression"
    loss = eval_loss(model, folder, job["spec"], tmp_path)
    assert loss == pytest.approx(job["evals"][2], abs=1e-4)
    # Cached beside the checkpoint, and the cache is what a second download sends.
    ckpt = Path(job["out"]) / "checkpoint-2"
    assert (ckpt / "hf" / "model.safetensors").is_file() and (ckpt / "hf.json").is_file()
    again = client.get(f"/v1/jobs/{job['id']}/checkpoints/2/download", headers=bearer(admin_token))
    assert again.status_code == 200 and len(again.content) > 0
    r = client.get(f"/v1/jobs/{job['id']}/checkpoints/3/download", headers=bearer(admin_token))
    assert r.status_code == 409 and "verified steps: [2, 4]" in r.json()["message"]


def test_lora_checkpoint_downloads_as_the_adapter_at_that_step(
    client: Any, db: Any, admin_token: str, data_root: Path, tmp_path: Path
) -> None:
    from peft import AutoPeftModelForCausalLM

    job = run_job(client, db, admin_token, lora_spec(data_root), tmp_path / "stage")
    assert abs(job["evals"][2] - job["evals"][4]) > 1e-4
    folder = download(client, admin_token, job["id"], 2, tmp_path / "dl")
    names = {p.name for p in folder.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= names
    assert "model.safetensors" not in names  # the adapter only: the base has a name
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(data_root / "base-llama")
    model = AutoPeftModelForCausalLM.from_pretrained(folder)
    loss = eval_loss(model, folder, job["spec"], tmp_path)
    assert loss == pytest.approx(job["evals"][2], abs=1e-4)


def test_concurrent_requests_consolidate_once(
    client: Any,
    db: Any,
    admin_token: str,
    data_root: Path,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = run_job(client, db, admin_token, regression_spec(data_root), tmp_path / "stage")
    runs: list[Path] = []
    real = checkpoint_models._run_export

    def counted(spec: Path, checkpoint: Path, out: Path, config: Any) -> None:
        runs.append(checkpoint)
        real(spec, checkpoint, out, config)

    monkeypatch.setattr(checkpoint_models, "_run_export", counted)
    source = CheckpointSource(
        job_id=job["id"], step=4, uri=f"{job['out']}/checkpoint-4", spec=job["spec"]
    )
    config = export_config(home=settings.home, python="", timeout_s=600, hf_home="")
    got: list[Any] = []
    threads = [
        threading.Thread(target=lambda: got.append(cached_model(source, config))) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 1 and len(got) == 3 and len(set(got)) == 1
    assert not list(Path(source.uri).glob(".hf-tmp-*"))  # no temporary left behind
    # A re-saved step (its manifest changed) is consolidated again, not served stale.
    manifest = Path(source.uri) / "manifest.json"
    manifest.write_text(manifest.read_text() + " ")
    cached_model(source, config)
    assert len(runs) == 2


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.mark.slow
def test_checkpoint_on_s3_downloads_and_caches_in_the_bucket(
    make_settings: Callable[..., Any], s3: S3Server, data_root: Path, tmp_path: Path
) -> None:
    from fastapi.testclient import TestClient
    from transformers import AutoModelForSequenceClassification

    from service.app import create_app
    from service.launch import InMemoryLauncher

    bucket = s3.bucket("ck-" + secrets.token_hex(4))
    settings = make_settings(storage=f"s3://{bucket}/shunter")
    app = create_app(settings, launcher=InMemoryLauncher())
    with TestClient(app) as client:
        token = settings.admin_token_path.read_text().strip()
        db = app.state.shunter.db
        job = run_job(client, db, token, regression_spec(data_root), tmp_path / "stage")
        folder = download(client, token, job["id"], 2, tmp_path / "dl")
        model = AutoModelForSequenceClassification.from_pretrained(folder)
        loss = eval_loss(model, folder, job["spec"], tmp_path)
        assert loss == pytest.approx(job["evals"][2], abs=1e-4)
        keys = set(s3.keys(bucket))
        prefix = f"shunter/{job['id']}/checkpoint-2"
        assert f"{prefix}/hf.json" in keys and f"{prefix}/hf/model.safetensors" in keys
