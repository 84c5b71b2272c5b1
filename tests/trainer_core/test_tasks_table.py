"""One shape per task: every task the spec accepts is a ``TaskOps`` in ``trainer_core.tasks``,
its eval metrics are the ones the spec lets ``metric_for_best_model`` name, and the loop,
data and model modules branch on no task name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import transformers

from shunter.jobspec.rules import best_metric_names
from shunter.jobspec.spec import TASKS
from trainer_core.tasks import TASK_OPS, task_ops

TRAINER_CORE = Path(__file__).resolve().parents[2] / "trainer_core"


def test_every_spec_task_has_its_ops() -> None:
    assert set(TASK_OPS) == set(TASKS)
    for name, ops in TASK_OPS.items():
        assert ops.name == name
        assert hasattr(transformers, ops.auto_class), ops.auto_class


@pytest.mark.parametrize("task", TASKS)
def test_eval_metrics_are_the_ones_the_spec_names(task: str) -> None:
    reported = set(task_ops(task).metrics([1.0] * 5))  # stats: sums of ≤ 5 entries
    assert "eval_loss" in reported
    assert reported == {m for m in best_metric_names(task) if m.startswith("eval_")}


def test_an_unknown_task_is_named() -> None:
    with pytest.raises(ValueError, match="unknown task 'nope'; one of causal-lm"):
        task_ops("nope")


@pytest.mark.parametrize("module", ["loop.py", "data.py", "model.py"])
def test_no_task_branches_outside_the_tasks_package(module: str) -> None:
    source = (TRAINER_CORE / module).read_text()
    for task in TASKS:
        assert f'"{task}"' not in source, f"{module} names the task {task!r}"
    assert not re.search(r"TASK_OPS\.get\(|task (==|!=|in) ", source)
