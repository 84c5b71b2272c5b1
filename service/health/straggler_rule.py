"""THE straggler and throughput rules: which window of per-rank times is an event. Pure.

The training loop reports, once per window (``trainer_core.step_timing``), each rank's mean
``compute_s`` and ``wait_s`` per step (metrics ``rank/<r>/compute_s``, ``rank/<r>/wait_s``)
and the gang's ``window/samples_per_s`` and ``window/tokens_per_s``.

- ``stragglers``: the ranks whose compute time over the window is above ``factor`` x the
  median over the gang's ranks (a rank that waits for the others is fast: it is judged on
  its own work, not its step time, which the gang's collectives make equal).
- ``throughput_drop``: the window's samples/s (or tokens/s) below ``drop`` x the median of
  the job's earlier windows, judged once at least ``MIN_HISTORY`` earlier windows exist, and
  reported when the drop begins (the window before was not below), not every window of it.
- ``cordon_due``: a node flagged ``after`` times is cordoned (``after`` 0: never).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "MIN_HISTORY",
    "RANKS_METRIC",
    "RANK_METRIC",
    "THROUGHPUT_METRICS",
    "Drop",
    "Straggler",
    "complete",
    "cordon_due",
    "rank_times",
    "stragglers",
    "throughput_drop",
]

RANK_METRIC = re.compile(r"^rank/(\d+)/(compute_s|wait_s)$")
THROUGHPUT_METRICS = ("window/samples_per_s", "window/tokens_per_s")
RANKS_METRIC = "window/ranks"  # how many ranks the window holds: complete when all arrived
MIN_HISTORY = 3  # earlier windows before a drop is judged (one slow start is no median)


@dataclass(frozen=True, kw_only=True)
class Straggler:
    rank: int
    compute_s: float
    wait_s: float | None
    median_s: float

    @property
    def ratio(self) -> float:
        return self.compute_s / self.median_s if self.median_s > 0 else float("inf")


def rank_times(points: Mapping[str, float]) -> dict[int, dict[str, float]]:
    """``{rank: {"compute_s": .., "wait_s": ..}}`` from one window's metrics."""
    out: dict[int, dict[str, float]] = {}
    for name, value in points.items():
        m = RANK_METRIC.match(name)
        if m is not None:
            out.setdefault(int(m.group(1)), {})[m.group(2)] = value
    return out


def complete(points: Mapping[str, float]) -> bool:
    """Every rank of the window has arrived (the points may come in several batches)."""
    ranks = points.get(RANKS_METRIC)
    if ranks is None:
        return False
    have = sum(1 for t in rank_times(points).values() if "compute_s" in t)
    return have >= int(ranks)


def stragglers(times: Mapping[int, Mapping[str, float]], *, factor: float) -> list[Straggler]:
    """The ranks slower than ``factor`` x the gang's median compute time, slowest first.
    A gang of one rank has no straggler."""
    compute = {r: t["compute_s"] for r, t in times.items() if "compute_s" in t}
    if len(compute) < 2:
        return []
    median = statistics.median(compute.values())
    slow = [
        Straggler(rank=r, compute_s=c, wait_s=times[r].get("wait_s"), median_s=median)
        for r, c in compute.items()
        if c > factor * median
    ]
    return sorted(slow, key=lambda s: (-s.compute_s, s.rank))


@dataclass(frozen=True, kw_only=True)
class Drop:
    metric: str  # "window/samples_per_s" | "window/tokens_per_s"
    value: float
    median: float


def throughput_drop(
    current: float, earlier: Sequence[float], *, metric: str, drop: float
) -> Drop | None:
    """``earlier``: the job's earlier windows of ``metric``, oldest first. A drop when
    ``current`` is below ``drop`` x their median and the last earlier window was not."""
    if len(earlier) < MIN_HISTORY:
        return None
    median = statistics.median(earlier)
    threshold = drop * median
    if current >= threshold or earlier[-1] < threshold:
        return None
    return Drop(metric=metric, value=current, median=median)


def cordon_due(flags: int, *, after: int) -> bool:
    """A node with ``flags`` straggler flags (since its last cordon) is cordoned now."""
    return after > 0 and flags >= after
