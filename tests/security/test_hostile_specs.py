"""A spec is data: a corpus of hostile specs, one row per way in. Each is refused with 422
naming the field, and nothing is queued. (On main 187a972 every row was accepted:
``config_overrides`` went to ``from_pretrained`` unfiltered and the DeepSpeed config was
merged unchecked.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sec_helpers import bearer, job_count, tiny_spec

from shunter.jobspec import check

_BERT = tiny_spec()["model"]["config_overrides"]


def _overrides(**extra: Any) -> dict[str, Any]:
    return tiny_spec(model={"config_overrides": {**_BERT, **extra}})


def _ds(config: dict[str, Any]) -> dict[str, Any]:
    return tiny_spec(distributed={"strategy": "deepspeed", "deepspeed": {"config": config}})


# (case, spec, loc of the error)
HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("trust-remote-code", _overrides(trust_remote_code=True),
     "model.config_overrides.trust_remote_code"),
    ("revision", _overrides(revision="evil-branch"), "model.config_overrides.revision"),
    ("cache-dir", _overrides(cache_dir="/etc"), "model.config_overrides.cache_dir"),
    ("device-map", _overrides(device_map="auto"), "model.config_overrides.device_map"),
    ("quantization-config", _overrides(quantization_config={"load_in_8bit": True}),
     "model.config_overrides.quantization_config"),
    ("attn-implementation", _overrides(attn_implementation="flash_attention_2"),
     "model.config_overrides.attn_implementation"),
    ("private-attn", _overrides(_attn_implementation="eager"),
     "model.config_overrides._attn_implementation"),
    ("auto-map-override", _overrides(auto_map={"AutoModel": "evil.Model"}),
     "model.config_overrides.auto_map"),
    ("torch-dtype", _overrides(torch_dtype="float64"), "model.config_overrides.torch_dtype"),
    ("offload-folder", _overrides(offload_folder="/tmp/x"),
     "model.config_overrides.offload_folder"),
    ("not-a-bert-field", _overrides(rope_theta=10000.0), "model.config_overrides.rope_theta"),
    ("unknown-model-type", tiny_spec(model={"config_overrides": {"model_type": "evil"}}),
     "model.config_overrides.model_type"),
    ("nested-value", _overrides(id2label={"0": {"deep": [1]}}), "model.config_overrides.id2label"),
    ("huge-string", _overrides(hidden_act="x" * 5000), "model.config_overrides.hidden_act"),
    ("ds-tensorboard", _ds({"tensorboard": {"enabled": True, "output_path": "/tmp/tb"}}),
     "distributed.deepspeed.config.tensorboard"),
    ("ds-wandb", _ds({"wandb": {"enabled": True, "project": "x"}}),
     "distributed.deepspeed.config.wandb"),
    ("ds-csv-monitor", _ds({"csv_monitor": {"enabled": True, "output_path": "/etc"}}),
     "distributed.deepspeed.config.csv_monitor"),
    ("ds-comet", _ds({"comet": {"enabled": True}}), "distributed.deepspeed.config.comet"),
    ("ds-flops-profiler", _ds({"flops_profiler": {"enabled": True, "output_file": "/etc/x"}}),
     "distributed.deepspeed.config.flops_profiler"),
    ("ds-checkpoint", _ds({"checkpoint": {"load_universal": True}}),
     "distributed.deepspeed.config.checkpoint"),
    ("ds-nvme-path", _ds({"zero_optimization": {"stage": 2, "offload_optimizer": {
        "device": "cpu", "nvme_path": "/etc"}}}),
     "distributed.deepspeed.config.zero_optimization.offload_optimizer.nvme_path"),
    ("ds-nvme-device", _ds({"zero_optimization": {"stage": 2, "offload_optimizer": {
        "device": "nvme"}}}),
     "distributed.deepspeed.config.zero_optimization.offload_optimizer.device"),
    ("ds-unknown-key", _ds({"module_name": "os.system"}),
     "distributed.deepspeed.config.module_name"),
    ("ds-aio", _ds({"aio": {"block_size": 1048576}}), "distributed.deepspeed.config.aio"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "spec", "loc"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_spec_is_422_and_nothing_is_queued(
    case: str, spec: dict[str, Any], loc: str, client: Any, admin_token: str
) -> None:
    before = job_count(client, admin_token)
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422, (case, r.text)
    assert loc in {d["loc"] for d in r.json()["detail"]}, r.json()
    assert job_count(client, admin_token) == before


def test_deepspeed_auto_and_numerics_stay_accepted() -> None:
    """The allow-list keeps Hugging Face's documented ``"auto"`` config shape working."""
    config = {
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": "auto"}},
        "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto",
                              "offload_optimizer": {"device": "cpu"}},
        "gradient_clipping": "auto",
        "train_micro_batch_size_per_gpu": "auto",
    }  # fmt: skip
    spec = _ds(config)
    spec["distributed"]["deepspeed"]["offload_optimizer"] = True
    _, errors = check(spec)
    assert [e for e in errors if e.loc.startswith("distributed")] == []


def test_real_config_fields_stay_accepted() -> None:
    _, errors = check(_overrides(hidden_dropout_prob=0.2, id2label={"0": "neg", "1": "pos"}))
    assert errors == []


def _model_dir(root: Path, name: str, config: dict[str, Any], files: dict[str, str]) -> Path:
    folder = root / "models" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    for fname, text in files.items():
        (folder / fname).write_text(text)
    return folder


def _local_model_spec(path: str, **overrides: Any) -> dict[str, Any]:
    return tiny_spec(
        model={"from_scratch": False, "name_or_path": path, "config_overrides": overrides}
    )


def test_auto_map_model_folder_is_422(client: Any, admin_token: str, data_root: Path) -> None:
    config = {"model_type": "bert", "auto_map": {"AutoModel": "modeling_evil.EvilModel"}}
    _model_dir(data_root, "evil", config, {"model.safetensors": "", "modeling_evil.py": ""})
    before = job_count(client, admin_token)
    r = client.post("/v1/jobs", json=_local_model_spec("models/evil"), headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    assert "auto_map" in r.json()["message"]
    assert job_count(client, admin_token) == before


def test_auto_map_tokenizer_folder_is_422(client: Any, admin_token: str, data_root: Path) -> None:
    tok_config = json.dumps({"auto_map": {"AutoTokenizer": ["x.T", None]}})
    _model_dir(data_root, "tok", {"model_type": "bert"}, {"tokenizer_config.json": tok_config})
    spec = tiny_spec(model={"tokenizer": "models/tok"})
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    assert {d["loc"] for d in r.json()["detail"]} == {"model.tokenizer"}


def test_pickle_only_model_is_422_unless_the_admin_allows_it(
    client: Any, admin_token: str, data_root: Path, make_settings: Any, launcher: Any
) -> None:
    _model_dir(data_root, "pickled", {"model_type": "bert"}, {"pytorch_model.bin": "x"})
    spec = _local_model_spec("models/pickled")
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    assert "pickle" in r.json()["message"]

    from fastapi.testclient import TestClient

    from service.app import create_app

    allowed = create_app(make_settings(allow_pickle_weights=True), launcher=launcher)
    with TestClient(allowed) as other:
        r = other.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 201, r.text


def test_overrides_are_checked_against_the_local_models_type(
    client: Any, admin_token: str, data_root: Path
) -> None:
    _model_dir(data_root, "bert", {"model_type": "bert"}, {"model.safetensors": ""})
    ok = client.post("/v1/jobs", json=_local_model_spec("models/bert", hidden_dropout_prob=0.2),
                     headers=bearer(admin_token))  # fmt: skip
    assert ok.status_code == 201, ok.text
    r = client.post("/v1/jobs", json=_local_model_spec("models/bert", rope_theta=1.0),
                    headers=bearer(admin_token))  # fmt: skip
    assert r.status_code == 422, r.text
    assert {d["loc"] for d in r.json()["detail"]} == {"model.config_overrides.rope_theta"}
