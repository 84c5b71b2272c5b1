"""Start-up trace (``SHUNTER_STARTUP_TRACE=1``): when each step of a job's start began and ended.

A measurement for ``bench/startup.py --trace``, off by default. When on, the training process
wraps trainer_core's set-up steps (process group, tokenizer, model, data, engine) and the
driver marks its own points; each prints one line to the job's log::

    shunter-trace: <who> <step> <start unix time> <end unix time>

``who`` is ``driver`` or ``rank<N>``. The bench reads the lines back from the job's log and
adds Ray's own times for its processes (``ray.util.state``: when each worker process was asked
for, started, and ready). Nothing changes in what a job does, only that it prints.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["PREFIX", "enabled", "install_in_trainer", "mark", "parse"]

PREFIX = "shunter-trace: "
_ENV = "SHUNTER_STARTUP_TRACE"
# trainer_core.loop's set-up calls, in the order a job makes them.
_TRAINER_STEPS = ("init_distributed", "build_tokenizer", "build_model", "load_data", "build_engine")


def enabled(env: dict[str, str] | None = None) -> bool:
    return (env if env is not None else os.environ).get(_ENV, "") not in {"", "0"}


def mark(who: str, step: str, start: float, end: float | None = None) -> None:
    """Print one trace line (``end`` defaults to ``start``: a point in time)."""
    end = start if end is None else end
    print(f"{PREFIX}{who} {step} {start:.3f} {end:.3f}", flush=True)


def _timed(who: str, step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            mark(who, step, t, time.time())

    return wrapper


def install_in_trainer(rank: int) -> None:
    """Time trainer_core's set-up steps in this (training) process: its first ``load_data``
    is the train split's."""
    from trainer_core import loop

    for step in _TRAINER_STEPS:
        setattr(loop, step, _timed(f"rank{rank}", step, getattr(loop, step)))


def parse(log_text: str) -> list[tuple[str, str, float, float]]:
    """The trace lines of a job's log: ``(who, step, start, end)``, first seen first."""
    out = []
    for line in log_text.splitlines():
        if PREFIX not in line:
            continue
        parts = line.split(PREFIX, 1)[1].split()
        if len(parts) == 4:
            out.append((parts[0], parts[1], float(parts[2]), float(parts[3])))
    return out
