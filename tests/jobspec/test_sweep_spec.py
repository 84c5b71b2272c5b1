"""``shunter.jobspec.sweep``: the sweep body's own checks, trial documents, corner points."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from shunter.jobspec import check
from shunter.jobspec.sweep import (
    IntDist,
    check_sweep,
    corner_points,
    objective_metric,
    trial_document,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweeps" / "sst2-lr.yaml"


def _body(**over: Any) -> dict[str, Any]:
    body = {
        "base": {"name": "x"},
        "space": {"training.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3}},
        "objective": "accuracy",
        "direction": "maximize",
        "max_trials": 4,
    }
    return {**body, **over}


def test_the_example_sweep_passes_and_its_base_is_a_valid_spec() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec, errors = check_sweep(doc)
    assert spec is not None and errors == []
    for point in corner_points(spec.space):
        _, errs = check(trial_document(spec.base, point))
        assert errs == [], (point, errs)


@pytest.mark.parametrize(
    ("over", "loc"),
    [
        ({"space": {}}, "space"),
        ({"space": {"lr": {"type": "float", "low": 1, "high": 2}}}, "space.lr"),
        ({"space": {"a.b": {"type": "float", "low": 2, "high": 1}}}, "space.a.b"),
        (
            {"space": {"a.b": {"type": "float", "low": 0, "high": 1, "log": True}}},
            "space.a.b",
        ),
        ({"space": {"a.b": {"type": "int", "low": 0, "high": 3, "log": True}}}, "space.a.b"),
        ({"space": {"a.b": {"type": "normal"}}}, "space.a.b"),
        ({"direction": "up"}, "direction"),
        ({"max_trials": 0}, "max_trials"),
        ({"max_parallel": 5}, "max_parallel"),
        ({"sampler": "cmaes"}, "sampler"),
        (
            {"sampler_settings": {"n_startup_trials": 2}, "sampler": "random"},
            "sampler_settings.n_startup_trials",
        ),
        (
            {"pruner": "median", "pruner_settings": {"n_warmup_steps": -1}},
            "pruner_settings.n_warmup_steps",
        ),
        ({"pruner": "none", "pruner_settings": {"x": 1}}, "pruner_settings"),
        ({"budget": {}}, "budget"),
    ],
)
def test_sweep_errors_name_the_field(over: dict[str, Any], loc: str) -> None:
    _, errors = check_sweep(_body(**over))
    assert errors, over
    assert any(e.loc == loc or e.loc.startswith(loc) for e in errors), [e.loc for e in errors]


def test_trial_document_sets_paths_and_copies() -> None:
    base = {"name": "x", "training": {"learning_rate": 1e-4}}
    doc = trial_document(base, {"training.learning_rate": 3e-5, "peft.lora.r": 8})
    assert doc["training"]["learning_rate"] == 3e-5 and doc["peft"] == {"lora": {"r": 8}}
    assert base["training"]["learning_rate"] == 1e-4  # the base is not changed


def test_corner_points_cover_every_bound_and_choice() -> None:
    space = {
        "a.x": IntDist(type="int", low=0, high=4),
        "a.y": IntDist(type="int", low=2, high=2),
    }
    assert corner_points(space) == [{"a.x": 0, "a.y": 2}, {"a.x": 4, "a.y": 2}]
    big = {f"a.p{i}": IntDist(type="int", low=0, high=1) for i in range(8)}  # 256 corners
    points = corner_points(big)
    assert len(points) == 2 + 8
    for path in big:
        assert {p[path] for p in points} == {0, 1}


def test_objective_metric() -> None:
    assert objective_metric("accuracy") == "eval_accuracy"
    assert objective_metric("eval_loss") == "eval_loss"
