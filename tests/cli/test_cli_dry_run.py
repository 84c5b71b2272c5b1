"""``shunter validate`` (offline plan), ``validate --server`` and ``submit --dry-run``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_server import LiveServer, valid_spec
from typer.testing import CliRunner, Result

from shunter.cli import app
from shunter.client import Client


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def member(live: LiveServer) -> str:
    return live.member_token(f"dry-{uuid.uuid4().hex[:6]}")


def write(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_offline_validate_prints_the_layout_without_counts(tmp_path: Path) -> None:
    spec = valid_spec("offline")
    spec["resources"] = {"num_workers": 4, "gpus_per_worker": 1, "cpus_per_worker": 1}
    spec["distributed"] = {"strategy": "fsdp", "fsdp": {"sharding": "hybrid_shard"}}
    spec["distributed"]["fsdp"]["hybrid_shard_size"] = 2
    spec["training"]["per_device_train_batch_size"] = 3
    path = write(tmp_path, spec)
    plan = as_json(run("validate", str(path), "--json"))["plan"]
    assert plan["world_size"] == 4 and plan["mesh"] == {"dp_replicate": 2, "dp_shard": 2}
    assert plan["global_batch_size"] == 12
    assert plan["param_count"] is None and plan["memory"]["total_bytes"] is None
    human = run("validate", str(path))
    assert human.exit_code == 0, human.output
    assert "world size 4" in human.output and "dp_replicate=2 x dp_shard=2" in human.output


def test_submit_dry_run_plans_on_the_server_and_queues_nothing(
    live: LiveServer, member: str, tmp_path: Path
) -> None:
    path = write(tmp_path, valid_spec("dry"))
    auth = ("--url", live.url, "--token", member)
    body = as_json(run("submit", "--dry-run", str(path), "--json", *auth))
    assert body["valid"] is True and body["spec"]["name"] == "dry"
    plan = body["plan"]
    assert plan["world_size"] == 1 and plan["param_count"] > 0
    steps = plan["memory"]["optimizer_bytes"] - 8 * plan["param_count"]  # a 4 B step per tensor
    assert 0 < steps < 4 * 100 and steps % 4 == 0
    assert plan["memory"]["total_bytes"] == 16 * plan["param_count"] + steps
    same = as_json(run("validate", str(path), "--server", "--json", *auth))
    assert same["plan"] == plan
    human = run("submit", "--dry-run", str(path), *auth)
    assert human.exit_code == 0, human.output
    assert "nothing queued" in human.output and "memory/device" in human.output
    with Client(live.url, member) as me:
        assert list(me.list()) == []


def test_dry_run_of_a_bad_spec_exits_2(live: LiveServer, member: str, tmp_path: Path) -> None:
    spec = valid_spec("bad")
    spec["data"]["train"] = {"path": "missing.tsv", "format": "csv"}  # a server-only check
    path = write(tmp_path, spec)
    assert run("validate", str(path)).exit_code == 0  # offline cannot see the data root
    result = run("submit", "--dry-run", str(path), "--url", live.url, "--token", member)
    assert result.exit_code == 2 and "data.train" in result.output


def test_offline_validate_counts_a_from_scratch_config(tmp_path: Path) -> None:
    """config_overrides with vocab_size pinned: the counts and memory are known offline."""
    from shunter.jobspec.param_count import count_params

    spec = valid_spec("scratch")
    spec["model"]["config_overrides"]["vocab_size"] = 100
    plan = as_json(run("validate", str(write(tmp_path, spec)), "--json"))["plan"]
    expected = count_params(
        {**spec["model"]["config_overrides"], "num_labels": 2}, "sequence-classification"
    )
    assert expected is not None and plan["param_count"] == expected
    assert plan["trainable_param_count"] == expected
    steps = plan["memory"]["optimizer_bytes"] - 8 * expected  # AdamW's 4 B step per tensor
    assert 0 < steps < 4 * 100 and steps % 4 == 0
    assert plan["memory"]["total_bytes"] == 16 * expected + steps  # fp32 + AdamW, one DDP rank
    spec["model"]["config_overrides"]["vocab_size"] = 101  # one more row of hidden_size 32
    wider = as_json(run("validate", str(write(tmp_path, spec)), "--json"))["plan"]
    assert wider["param_count"] == expected + 32


def test_offline_validate_reads_a_local_model_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model folder under the working directory: its config.json is read (no torch)."""
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    config = {"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 50}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    spec = valid_spec("local")
    spec["model"] = {"name_or_path": "models/tiny", "task": "causal-lm", "lora": {"r": 2}}
    del spec["data"]["label_field"]
    monkeypatch.chdir(tmp_path)
    plan = as_json(run("validate", str(write(tmp_path, spec)), "--json"))["plan"]
    # embed + q,k,v,o + MLP + 2 norms + final norm + untied lm_head; LoRA r=2 on q and v.
    assert plan["param_count"] == 50 * 16 + 4 * 16 * 16 + 3 * 16 * 32 + 3 * 16 + 50 * 16
    assert plan["trainable_param_count"] == 2 * 2 * (16 + 16)
    monkeypatch.chdir(tmp_path / "models")  # elsewhere the folder is not found: unknown
    plan = as_json(run("validate", str(tmp_path / "job.yaml"), "--json"))["plan"]
    assert plan["param_count"] is None
