"""The simulator's summary: per-team usage, waits and fair-share error; utilisation, Jain's
index, preemptions and ETA error. Pure functions over the simulated timeline.

Share figures use GPUs, or CPUs on a cluster without GPUs. *Contended* time is when at least
two teams have demand (queued or running) and every team with demand has work queued (that
fits the cluster): all of them want more than they hold. Over contended time each
team's fair allocation is the weighted max-min fair share of the cluster given every team's
demand at that moment (``policy.fairshare.max_min_fair``); ``share_error`` is
|held - fair| / fair, and Jain's index is over held / fair (the weight-normalised share:
with all teams demanding more than their share, fair is the weight's fraction).

On a mixed cluster (GPUs of two or more types, ``Interval.shares``) pooled GPU-seconds
misjudge a team that holds all of a small type: there ``contended_s``, ``fair_contended_s``,
``share_error`` and Jain's index are over the type-weighted dominant share
(``fairshare.dominant_share``) held and the fair one (each type shared out by itself,
``fairshare.fair_dominant``, as the owed account has it), in share-seconds, over the time
the owed account counts as contended; ``share_error_pooled`` keeps the GPU-second figure
and ``share_basis`` says so. The GPU-seconds of each team on each type are in the
summary's ``by_type`` (``service.sim.outcome``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.policy.fairshare import max_min_fair

__all__ = ["LONG_WAIT_S", "Interval", "eta_calibration", "jain", "percentile", "summarize"]

LONG_WAIT_S = 600.0  # ETA calibration counts the jobs that waited at least this long


@dataclass(frozen=True, kw_only=True)
class Interval:
    start_s: float
    end_s: float
    held: Mapping[str, tuple[float, float]]  # team -> (cpus, gpus) held
    demand: Mapping[str, tuple[float, float]]  # team -> (cpus, gpus) queued + running
    waiting: int  # queued jobs
    waiting_teams: frozenset[str] = frozenset()  # teams with a queued job
    # A mixed cluster: team -> (held, fair) type-weighted dominant share while the teams
    # contend ({} when they do not; the owed account's, ``fairshare.contended_fair``);
    # None on an untyped or one-type cluster.
    shares: Mapping[str, tuple[float, float]] | None = None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def jain(xs: Sequence[float]) -> float | None:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 = equal."""
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if xs and sq > 0 else None


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _contended(iv: Interval) -> bool:
    """Two or more teams have demand and each of them has work queued."""
    demanding = {t for t, d in iv.demand.items() if d[0] > 0 or d[1] > 0}
    return len(demanding) >= 2 and demanding <= iv.waiting_teams


def _error(held: float, fair: float) -> float | None:
    return abs(held - fair) / fair if fair > 0 else None


def summarize(
    jobs: Sequence[Mapping[str, Any]],
    intervals: Sequence[Interval],
    *,
    weights: Mapping[str, float],
    total_cpus: float,
    total_gpus: float,
) -> dict[str, Any]:
    r = 1 if total_gpus > 0 else 0  # the resource shares are measured in
    cap = total_gpus if r else total_cpus
    teams = sorted(weights)
    used = {t: [0.0, 0.0] for t in teams}
    held_c = dict.fromkeys(teams, 0.0)
    fair_c = dict.fromkeys(teams, 0.0)
    contended_s = 0.0
    typed = False
    held_d = dict.fromkeys(teams, 0.0)
    fair_d = dict.fromkeys(teams, 0.0)
    for iv in intervals:
        dt = iv.end_s - iv.start_s
        for t, (c, g) in iv.held.items():
            used[t][0] += c * dt
            used[t][1] += g * dt
        if iv.shares is not None:
            typed = True
            for t, (h, f) in iv.shares.items():
                held_d[t] += h * dt
                fair_d[t] += f * dt
        if not _contended(iv):
            continue
        contended_s += dt
        fair = max_min_fair({t: d[r] for t, d in iv.demand.items()}, weights, cap)
        for t in iv.demand:
            held_c[t] += iv.held.get(t, (0.0, 0.0))[r] * dt
            fair_c[t] += fair[t] * dt
    pooled = {t: _error(held_c[t], fair_c[t]) for t in teams}
    if typed:  # a mixed cluster: the error is over the dominant shares per type
        held_c, fair_c = held_d, fair_d
    waits: dict[str, list[float]] = {t: [] for t in teams}
    eta_err: list[float] = []
    for j in jobs:
        if j["runs"]:
            waits[j["team"]].append(j["runs"][0][0] - j["submit_s"])
            if j["estimated_start_s"] is not None:
                eta_err.append(abs(j["runs"][0][0] - j["estimated_start_s"]))
    span = (
        max(iv.end_s for iv in intervals) - min(iv.start_s for iv in intervals) if intervals else 0
    )
    busy = sum(u[r] for u in used.values())
    # Utilisation while work waits: capacity held over the time some job was queued (a
    # work-conserving policy keeps this near 1; the drain at the end does not count).
    wait_s = sum(iv.end_s - iv.start_s for iv in intervals if iv.waiting > 0)
    wait_busy = sum(
        sum(h[r] for h in iv.held.values()) * (iv.end_s - iv.start_s)
        for iv in intervals
        if iv.waiting > 0
    )
    per_team = {
        t: {
            "weight": weights[t],
            "gpu_s": round(used[t][1], 1),
            "cpu_s": round(used[t][0], 1),
            "jobs": sum(1 for j in jobs if j["team"] == t),
            "mean_wait_s": _r(sum(waits[t]) / len(waits[t]) if waits[t] else None),
            "p95_wait_s": _r(percentile(waits[t], 95)),
            "contended_s": round(held_c[t], 1),
            "fair_contended_s": round(fair_c[t], 1),
            "share_error": _r(_error(held_c[t], fair_c[t])),
            **({"share_error_pooled": _r(pooled[t])} if typed else {}),
        }
        for t in teams
    }
    all_waits = [w for ws in waits.values() for w in ws]
    ratios = [held_c[t] / fair_c[t] for t in teams if fair_c[t] > 0]
    return {
        "teams": per_team,
        "utilisation": _r(wait_busy / (cap * wait_s) if cap > 0 and wait_s > 0 else None),
        "utilisation_overall": _r(busy / (cap * span) if cap > 0 and span > 0 else None),
        "makespan_s": round(span, 1),
        "contended_s": round(contended_s, 1),
        "jain_index": _r(jain(ratios)),
        **({"share_basis": "dominant share per type"} if typed else {}),
        "p95_wait_s": _r(percentile(all_waits, 95)),
        "preemptions": sum(int(j["preemptions"]) for j in jobs),
        "never_started": sum(1 for j in jobs if not j["runs"]),
        "eta_error_s": {
            "median": _r(percentile(eta_err, 50)),
            "p90": _r(percentile(eta_err, 90)),
            "jobs": len(eta_err),
        },
        "eta": eta_calibration(jobs),
    }


def eta_calibration(
    jobs: Sequence[Mapping[str, Any]], *, min_wait_s: float = LONG_WAIT_S
) -> dict[str, Any]:
    """How right the first start estimates were, over the jobs that started after waiting at
    least ``min_wait_s`` and got an estimate: the median and p90 of |actual - estimated| /
    actual wait, and the coverage of the p90 range [submit, ``estimated_start_p90_s``]: the
    fraction of those jobs that started inside it (a calibrated p90 covers ~90%)."""
    rel: list[float] = []
    covered = ranged = 0
    for j in jobs:
        est = j.get("estimated_start_s")
        if not j["runs"] or est is None:
            continue
        start = j["runs"][0][0]
        wait = start - j["submit_s"]
        if wait < min_wait_s:
            continue
        rel.append(abs(start - est) / wait)
        p90 = j.get("estimated_start_p90_s")
        if p90 is not None:
            ranged += 1
            covered += start <= p90 + 1e-6
    return {
        "jobs": len(rel),
        "min_wait_s": min_wait_s,
        "median_rel_error": _r(percentile(rel, 50)),
        "p90_rel_error": _r(percentile(rel, 90)),
        "p90_coverage": _r(covered / ranged if ranged else None),
    }
