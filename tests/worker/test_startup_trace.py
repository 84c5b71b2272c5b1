"""worker.startup_trace: the lines bench/startup.py --trace reads back, and the wrapping of
trainer_core's set-up steps (pure: no Ray, no training)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from worker import startup_trace


def test_marks_round_trip_through_a_log(capsys: pytest.CaptureFixture[str]) -> None:
    startup_trace.mark("driver", "fit", 1700000000.25)
    startup_trace.mark("rank1", "build_model", 1700000001.5, 1700000002.0)
    log = "ray noise\n(RayTrainWorker pid=1) " + capsys.readouterr().out + "shunter-trace: bad\n"
    assert startup_trace.parse(log) == [
        ("driver", "fit", 1700000000.25, 1700000000.25),
        ("rank1", "build_model", 1700000001.5, 1700000002.0),
    ]


def test_enabled_only_when_set() -> None:
    assert not startup_trace.enabled({})
    assert not startup_trace.enabled({"SHUNTER_STARTUP_TRACE": "0"})
    assert startup_trace.enabled({"SHUNTER_STARTUP_TRACE": "1"})


def test_install_times_each_setup_step_and_keeps_its_result(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainer_core import loop

    for step in ("init_distributed", "build_tokenizer", "build_model", "load_data", "build_engine"):
        monkeypatch.setattr(loop, step, getattr(loop, step))  # restored after the test

    def slow_model(*args: object, **kwargs: object) -> str:
        time.sleep(0.05)
        return f"model{args}{kwargs}"

    monkeypatch.setattr(loop, "build_model", slow_model)
    startup_trace.install_in_trainer(3)
    wrapped: Any = getattr(loop, "build_model")  # noqa: B009  (not in its __all__)
    assert wrapped(1, seed=2) == "model(1,){'seed': 2}"
    ((who, step, start, end),) = startup_trace.parse(capsys.readouterr().out)
    assert (who, step) == ("rank3", "build_model")
    # the marks are wall-clock seconds printed to the millisecond: allow that rounding
    assert end - start >= 0.05 - 0.002
