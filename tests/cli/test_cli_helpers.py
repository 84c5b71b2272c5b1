"""Pure helpers behind the CLI: ``--set`` overrides, sparklines, the ``init`` template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from shunter.cli import app
from shunter.cli.overrides import OverrideError, apply_overrides, parse_value
from shunter.cli.render import job_detail, sparkline
from shunter.client.responses import Job


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3e-5", 3e-5),  # PyYAML alone would give the string "3e-5"
        ("5.0e-5", 5e-5),
        ("16", 16),
        ("true", True),
        ("null", None),
        ("cosine", "cosine"),
        ("[q_proj, v_proj]", ["q_proj", "v_proj"]),
        ('"007"', "007"),
    ],
)
def test_parse_value_reads_yaml_scalars(text: str, value: object) -> None:
    assert parse_value(text) == value


def test_apply_overrides_sets_nested_paths_without_mutating_input() -> None:
    spec = {"training": {"learning_rate": 1e-3}, "name": "a"}
    out = apply_overrides(
        spec, ["training.learning_rate=3e-5", "model.lora.r=8", "name=b", "training.bf16=true"]
    )
    assert out == {
        "training": {"learning_rate": 3e-5, "bf16": True},
        "model": {"lora": {"r": 8}},
        "name": "b",
    }
    assert spec == {"training": {"learning_rate": 1e-3}, "name": "a"}


@pytest.mark.parametrize("item", ["noequals", "=1", "a..b=1", "name.x=1"])
def test_apply_overrides_rejects_malformed_items(item: str) -> None:
    with pytest.raises(OverrideError):
        apply_overrides({"name": "a"}, [item])


def test_sparkline_shape() -> None:
    assert sparkline([]) == ""
    assert sparkline([1.0, 1.0]) == "▄▄"
    assert sparkline([3.0, 2.0, 1.0, 0.0]) == "█▆▃▁"
    long = sparkline([float(100 - i) for i in range(1000)], width=20)
    assert len(long) == 20 and long[0] == "█" and long[-1] == "▁"
    assert sparkline([1.0, float("nan"), 0.0]) == "█▁"


def test_init_writes_a_spec_that_validates(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "sst2").mkdir(parents=True)
    for split in ("train", "dev"):
        (root / "sst2" / f"{split}.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    model = root / "models" / "all-MiniLM-L6-v2"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(_TINY_BERT))
    target = tmp_path / "job.yaml"
    runner = CliRunner()
    first = runner.invoke(app, ["init", str(target)])
    assert first.exit_code == 0, first.output
    assert "# " in target.read_text()  # commented for humans
    spec = yaml.safe_load(target.read_text())
    assert spec["data"]["train"] == {"path": "sst2/train.tsv", "format": "csv", "delimiter": "\t"}
    checked = runner.invoke(app, ["validate", str(target), "--json"])
    assert checked.exit_code == 0, checked.output
    resolved = json.loads(checked.stdout)["spec"]
    assert resolved["model"]["name_or_path"] == "models/all-MiniLM-L6-v2"  # resolved by the server
    again = runner.invoke(app, ["init", str(target)])
    assert again.exit_code == 5 and "exists" in again.output


_TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "vocab_size": 100,
}


def test_job_detail_shows_latest_metrics_error_and_queue_reason() -> None:
    job = Job.model_validate(
        {
            "id": "job-1",
            "name": "demo",
            "team": "t",
            "status": "failed",
            "attempt": 1,
            "progress": {"step": 5, "total_steps": 20},
            "latest_metrics": {"loss": 0.4321, "learning_rate": 3e-5, "step": 5},
            "error": {"type": "user_error", "message": "column 'text' not in train.tsv"},
        }
    )
    console = Console(width=100, record=True)
    console.print(job_detail(job))
    text = console.export_text()
    assert "5/20 (25%)" in text and "Latest metrics (step 5)" in text
    assert "0.4321" in text and "3e-05" in text
    assert "error (user_error): column 'text' not in train.tsv" in text
    queued = job.model_copy(
        update={"status": "queued", "queue_position": 2, "pending_reason": "team quota"}
    )
    console.print(job_detail(queued))
    assert "team quota" in console.export_text()
