"""``shunter data push|ls|show|rm`` and ``shunter models push|ls|show|rm`` against a live
server: a file and a folder streamed up as multipart parts, checked, listed and removed; a
bad file exits 2 naming the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from live_server import LiveServer
from typer.testing import CliRunner, Result

from shunter.cli import app


def run(live: LiveServer, *args: str) -> Result:
    argv = [*args, "--url", live.url, "--token", live.admin_token]
    return CliRunner(env={"COLUMNS": "240"}).invoke(app, argv)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_data_push_ls_show_rm(live: LiveServer, tmp_path: Path) -> None:
    one = tmp_path / "films.tsv"
    one.write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    pushed = as_json(run(live, "data", "push", str(one), "--name", "films", "--json"))
    assert pushed["id"].startswith("ds-") and pushed["rows"] == 2 and pushed["name"] == "films"

    folder = tmp_path / "shards"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "0.jsonl").write_text('{"text": "x"}\n{"text": "y"}\n')
    (folder / "1.jsonl").write_text('{"text": "z"}\n')
    shards = as_json(run(live, "data", "push", str(folder), "--json"))
    assert shards["files"] == ["1.jsonl", "a/0.jsonl"] and shards["rows"] == 3

    listed = run(live, "data", "ls")
    assert listed.exit_code == 0 and pushed["id"] in listed.output and "films" in listed.output
    ids = [d["id"] for d in as_json(run(live, "data", "ls", "--json"))]
    assert ids == [shards["id"], pushed["id"]]
    shown = run(live, "data", "show", pushed["id"])
    assert shown.exit_code == 0 and "sentence, label" in shown.output and "good" in shown.output

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\nnot json\n')
    result = run(live, "data", "push", str(bad))
    assert result.exit_code == 2 and "line 2" in result.output, result.output

    assert run(live, "data", "rm", pushed["id"]).exit_code == 0
    assert run(live, "data", "show", pushed["id"]).exit_code == 4
    assert [d["id"] for d in as_json(run(live, "data", "ls", "--json"))] == [shards["id"]]


def test_models_push_ls_rm(live: LiveServer, tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"\0" * 128)
    (folder / "tokenizer.json").write_text("{}")
    pushed = as_json(run(live, "models", "push", str(folder), "--json"))
    assert pushed["id"].startswith("mdl-") and pushed["format"] == "hf"
    assert [m["id"] for m in as_json(run(live, "models", "ls", "--json"))] == [pushed["id"]]
    assert run(live, "models", "rm", pushed["id"]).exit_code == 0
    assert as_json(run(live, "models", "ls", "--json")) == []
