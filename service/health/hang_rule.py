"""THE hang rule: when a running job is hung, and what then. Pure; table-tested.

- ``hang_verdict``: an attempt with no step ``startup_s`` after its launch is hung at start-up;
  one whose last step is older than ``max(factor x p50 step time x logging_steps, floor_s)``
  is stalled. Steps reach the service only at logging steps (``training.logging_steps``), so
  the expected gap between two of them is the p50 step time times that interval.
- ``StepTimes``: the p50 of each attempt's recent ``step_time_s`` points, fed one point per
  tick by the watcher (no history query per job).
- ``decide_after_hang``: requeue from the newest verified checkpoint, or fail ``hung`` when the
  job hung before at the same step or its hangs used up ``max_restarts``.
"""

from __future__ import annotations

import re
import statistics
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from shunter.jobspec.spec import HangSpec

__all__ = [
    "HangDecision",
    "StepTimes",
    "Verdict",
    "decide_after_hang",
    "hang_message",
    "hang_verdict",
    "hung_step",
]

_SAMPLES = 21  # step-time points the p50 is taken over, per attempt


@dataclass(frozen=True, kw_only=True)
class Verdict:
    kind: Literal["startup", "stalled"]
    idle_s: float  # seconds since launch (startup) or since the last step (stalled)
    bound_s: float
    p50_step_s: float | None


def hang_verdict(
    *,
    now: datetime,
    launched_at: datetime,
    last_step_at: datetime | None,
    p50_step_s: float | None,
    logging_steps: int,
    hang: HangSpec,
) -> Verdict | None:
    """Whether an attempt is hung now. ``last_step_at``: when its newest step reached the
    service (None: no step yet in this attempt). ``p50_step_s``: None when unknown."""
    if last_step_at is None:
        idle = (now - launched_at).total_seconds()
        if idle > hang.startup_s:
            return Verdict(kind="startup", idle_s=idle, bound_s=hang.startup_s, p50_step_s=None)
        return None
    gap = hang.factor * p50_step_s * max(1, logging_steps) if p50_step_s else 0.0
    bound = max(gap, hang.floor_s)
    idle = (now - last_step_at).total_seconds()
    if idle > bound:
        return Verdict(kind="stalled", idle_s=idle, bound_s=bound, p50_step_s=p50_step_s)
    return None


class StepTimes:
    """The last ``_SAMPLES`` step-time points of each watched attempt (one per new step)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], tuple[int, deque[float]]] = {}

    def add(self, key: tuple[str, int], *, step: int | None, value: float | None) -> None:
        if step is None or value is None or value <= 0:
            return
        last, samples = self._seen.get(key, (-1, deque(maxlen=_SAMPLES)))
        if step != last:
            samples.append(value)
        self._seen[key] = (step, samples)

    def p50(self, key: tuple[str, int]) -> float | None:
        got = self._seen.get(key)
        return statistics.median(got[1]) if got and got[1] else None

    def keep_only(self, keys: set[tuple[str, int]]) -> None:
        """Forget attempts no longer watched (ended, or this process lost the lead)."""
        for key in set(self._seen) - keys:
            del self._seen[key]


@dataclass(frozen=True, kw_only=True)
class HangDecision:
    fail: bool
    why: str


def decide_after_hang(
    *, step: int | None, earlier: list[int | None], max_restarts: int
) -> HangDecision:
    """``step``: the hung attempt's last step (None: at start-up); ``earlier``: the steps of
    the job's earlier hangs. Fail when it hung at this step before (a resume cannot get past
    it) or the hangs used up ``max_restarts``; else resume."""
    if step is not None and step in earlier:
        return HangDecision(fail=True, why=f"hung again at step {step}")
    if len(earlier) >= max_restarts:
        return HangDecision(
            fail=True, why=f"{len(earlier) + 1} hangs; max_restarts is {max_restarts}"
        )
    return HangDecision(
        fail=False,
        why=f"resuming from the last verified checkpoint (hang {len(earlier) + 1}/"
        f"{max_restarts} of max_restarts)",
    )


# The ``hung`` event's message starts with the step, read back by ``hung_step`` (the bound).
_STEP = re.compile(r"^hung at (?:step (\d+)|start-up)")


def hang_message(*, step: int | None, attempt: int, verdict: Verdict, ranks: str) -> str:
    where = f"step {step}" if step is not None else "start-up"
    if verdict.kind == "startup":
        why = f"no step {verdict.idle_s:.0f} s after launch (startup_s {verdict.bound_s:g})"
    else:
        p50 = f"{verdict.p50_step_s:.3g} s" if verdict.p50_step_s else "unknown"
        why = (
            f"no new step for {verdict.idle_s:.0f} s "
            f"(bound {verdict.bound_s:.3g} s, p50 step {p50})"
        )
    return f"hung at {where} (attempt {attempt}): {why}; {ranks}"


def hung_step(message: str) -> tuple[bool, int | None]:
    """(is a hang message, its step) of a ``hung`` event's message."""
    m = _STEP.match(message)
    if m is None:
        return False, None
    return True, int(m.group(1)) if m.group(1) else None
