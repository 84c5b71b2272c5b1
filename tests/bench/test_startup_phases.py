"""bench/startup.py's phase split, on recorded events (no server): the part a smoke run at
tiny size cannot check, since its figures mean nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> object:
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_startup", ROOT / "bench" / "startup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


T0 = 1_700_000_000.0


def _at(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(T0 + seconds, UTC).isoformat()


def test_phase_events_win_and_each_phase_counts_once() -> None:
    bench = _bench()
    events = [
        {"type": "submitted", "time": _at(0.01), "message": "submitted by admin"},
        {"type": "claimed", "time": _at(0.3), "message": "attempt 1 claimed"},
        {"type": "phase", "time": _at(0.31), "message": "claimed: 0.30 s after submitted"},
        {"type": "phase", "time": _at(0.5), "message": "launched: 0.19 s after claimed"},
        {"type": "running", "time": _at(2.0), "message": "attempt 1 running"},
        {"type": "phase", "time": _at(4.0), "message": "workers_up: 3.5 s after launched"},
        {"type": "phase", "time": _at(6.0), "message": "model_built: 2 s after workers_up"},
        {"type": "succeeded", "time": _at(9.0), "message": "attempt 1 succeeded"},
    ]
    log = "shunter: rank 0 entered the training function at 1700000003.000; imports took 1s"
    got = bench.phase_times(T0, events, [T0 + 7.0, T0 + 6.5], log)  # type: ignore[attr-defined]
    assert got == pytest.approx(
        {
            "claimed": 0.3,  # the status event comes first; the phase event is not counted again
            "launched": 0.5,
            "running": 2.0,
            "workers_up": 4.0,  # the phase event, not the log line
            "model_built": 6.0,
            "first_step": 6.5,  # the earliest loss point
            "succeeded": 9.0,
        },
        abs=1e-3,
    )


def test_without_phase_events_the_log_line_and_gaps() -> None:
    bench = _bench()
    events = [{"type": "claimed", "time": _at(1.0), "message": "attempt 1 claimed"}]
    log = "x\nshunter: rank 0 entered the training function at 1700000005.250; imports took 4s"
    got = bench.phase_times(T0, events, [], log)  # type: ignore[attr-defined]
    assert got["claimed"] == 1.0
    assert got["workers_up"] == pytest.approx(5.25, abs=1e-3)
    assert got["launched"] is None and got["model_built"] is None and got["first_step"] is None


def test_warm_medians_leave_the_cold_job_out() -> None:
    bench = _bench()
    jobs = [
        {"first_step": 20.0, "total": 30.0, "model_built": None},
        {"first_step": 4.0, "total": 10.0, "model_built": None},
        {"first_step": 6.0, "total": 14.0, "model_built": None},
    ]
    jobs = [{**dict.fromkeys(bench.PHASES), **j} for j in jobs]  # type: ignore[attr-defined]
    med = bench.warm_medians(jobs)  # type: ignore[attr-defined]
    assert med["first_step"] == 5.0 and med["total"] == 12.0 and med["model_built"] is None
