"""``shunter clone`` and ``shunter diff`` against a live API server: a clone with one --set
differs from its source only there, in spec and record; a bad --set is the server's 422
naming the field (exit 2)."""

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
from shunter.cli.reproduce import differences


def run(live: LiveServer, *args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--url", live.url, "--token", live.admin_token])


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def source(live: LiveServer, tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(valid_spec(f"clone-{uuid.uuid4().hex[:6]}")))
    job_id: str = as_json(run(live, "submit", str(path), "--json"))["id"]
    return job_id


def test_a_clone_with_one_set_differs_only_there(live: LiveServer, source: str) -> None:
    clone = as_json(run(live, "clone", source, "--set", "training.learning_rate=1e-4", "--json"))
    assert clone["id"] != source and clone["status"] == "queued"
    found = as_json(run(live, "diff", source, clone["id"], "--json"))
    assert list(found["spec"]) == ["training.learning_rate"]
    assert found["spec"]["training.learning_rate"]["b"] == 1e-4
    assert found["record"] == {}  # same code, same data fingerprints, same seed
    text = run(live, "diff", source, clone["id"])
    assert text.exit_code == 0 and "training.learning_rate" in text.stdout
    assert "record: the same" in text.stdout
    same = run(live, "diff", source, source)
    assert same.exit_code == 0 and "same spec, same record" in same.stdout


def test_a_bad_set_is_exit_2_naming_the_field(live: LiveServer, source: str) -> None:
    bad = run(live, "clone", source, "--set", "training.learning_rat=1e-4")
    assert bad.exit_code == 2 and "training.learning_rat" in bad.output, bad.output
    malformed = run(live, "clone", source, "--set", "training.learning_rate")
    assert malformed.exit_code == 2 and "dotted.path=value" in malformed.output
    checkpoint = run(live, "clone", source, "--from-checkpoint", "newest")
    assert checkpoint.exit_code == 2 and "--from-checkpoint" in checkpoint.output


def test_clone_of_an_unknown_job_is_exit_4(live: LiveServer) -> None:
    assert run(live, "clone", "job-0nosuch").exit_code == 4


def test_differences_walks_nested_fields_and_marks_absent_ones() -> None:
    a = {"training": {"seed": 1, "lr": 0.1}, "tags": [1, 2], "x": {"y": 1}}
    b = {"training": {"seed": 2, "lr": 0.1}, "tags": [1, 3], "z": None}
    assert differences(a, b) == {
        "training.seed": (1, 2),
        "tags": ([1, 2], [1, 3]),
        "x.y": (1, "-"),
        "z": ("-", None),
    }
    assert differences(None, {}) == {}
