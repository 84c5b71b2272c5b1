"""A third contended-day generator for the ETA bars (issue 30): teams that differ in every
habit an ETA must learn, drawn per team and per seed, so a model tuned to ``trace.py``'s
``busy`` and ``bursty`` days is not tuned to this one.

Per team (drawn from the seed): how much it submits (0.3-3x, not by weight), whether in
sweeps; its job sizes (mostly 1 GPU, mostly 2-4, or gang-heavy up to 4 whole nodes); how it
bounds its jobs (run time ÷ limit: tight 0.75-1, moderate 0.3-0.7, loose 0.05-0.3); how
often its jobs crash early (0-30% end at 1-30% of their work); its priority mix (0-15%
high, 0-30% low) and non-preemptible share (0-20%). Run times are heavy-tailed (Pareto,
shape 1.5: most minutes, a few a day or more, capped at 2 days); submits follow a day/night
cycle (3x at the peak). Run times are scaled so the GPU-seconds submitted are ``load`` x the
cluster's over ``hours``. Deterministic for ``seed``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

__all__ = ["generate_mixed"]

_DAY = 86_400.0


def _team_habits(rng: random.Random, node_gpus: int) -> dict[str, Any]:
    sizes = rng.choice(["small", "medium", "gangs"])
    bound = rng.choice(["tight", "moderate", "loose"])
    return {
        "rate": rng.uniform(0.3, 3.0),
        "sweeps": rng.random() < 0.5,
        "sizes": sizes,
        "fraction": {"tight": (0.75, 1.0), "moderate": (0.3, 0.7), "loose": (0.05, 0.3)}[bound],
        "crash": rng.uniform(0.0, 0.3),
        "high": rng.uniform(0.0, 0.15),
        "low": rng.uniform(0.0, 0.3),
        "pinned": rng.uniform(0.0, 0.2),
        "node_gpus": node_gpus,
    }


def _shape(rng: random.Random, habits: Mapping[str, Any]) -> tuple[int, float]:
    node = float(habits["node_gpus"])
    r = rng.random()
    if habits["sizes"] == "small":
        return (1, 1.0) if r < 0.85 else (1, 2.0) if r < 0.97 else (1, node)
    if habits["sizes"] == "medium":
        return (
            (1, 1.0) if r < 0.3 else (1, 2.0) if r < 0.65 else (1, 4.0) if r < 0.95 else (1, node)
        )
    return (1, 1.0) if r < 0.4 else (1, node) if r < 0.75 else (rng.choice([2, 4]), node)


def generate_mixed(
    *,
    weights: Mapping[str, float],
    hours: float = 24.0,
    jobs: int = 1500,
    seed: int = 0,
    cluster_gpus: int = 32,
    load: float = 1.6,
    node_gpus: int = 8,
    cpus_per_gpu: float = 8.0,
) -> list[dict[str, Any]]:
    """About ``jobs`` trace lines (``trace.load_trace``'s fields) over ``hours``; the teams
    are ``weights``' keys (their weights are the cluster's business, not the trace's)."""
    rng = random.Random(seed)
    names = sorted(weights)
    habits = {t: _team_habits(rng, node_gpus) for t in names}
    total = sum(h["rate"] for h in habits.values())
    span = hours * 3600.0
    out: list[dict[str, Any]] = []
    counts = dict.fromkeys(names, 0)

    def one(team: str, t: float, shape: tuple[int, float], work: float) -> None:
        h = habits[team]
        lo, hi = h["fraction"]
        limit = work / rng.uniform(lo, hi)  # the user's bound for the work it expects
        if rng.random() < h["crash"]:
            work *= rng.uniform(0.01, 0.3)  # it fails early
        r = rng.random()
        out.append(
            {
                "id": f"{team}-{counts[team]:05d}",
                "team": team,
                "submit_s": round(t, 1),
                "num_workers": shape[0],
                "gpus_per_worker": shape[1],
                "cpus_per_worker": shape[1] * cpus_per_gpu,
                "duration_s": work,
                "max_runtime_s": limit,
                "priority": "high"
                if r < h["high"]
                else "low"
                if r < h["high"] + h["low"]
                else "normal",
                "preemptible": rng.random() >= h["pinned"],
            }
        )
        counts[team] += 1

    def work() -> float:
        return min(600.0 * rng.paretovariate(1.5), 2 * _DAY)

    while len(out) < jobs:
        team = rng.choices(names, weights=[habits[t]["rate"] / total for t in names])[0]
        while True:  # day/night: the submit rate peaks mid-day at 3x the night's
            t = rng.uniform(0.0, span)
            if rng.random() < (2 + math.sin(2 * math.pi * (t / _DAY - 0.25))) / 3:
                break
        if habits[team]["sweeps"] and rng.random() < 0.1:
            sh, w = _shape(rng, habits[team]), work()
            for _ in range(rng.randint(5, 25)):
                one(team, t + rng.uniform(0.0, 120.0), sh, w * rng.uniform(0.8, 1.2))
        else:
            one(team, t, _shape(rng, habits[team]), work())
    gpu_s = sum(x["num_workers"] * x["gpus_per_worker"] * x["duration_s"] for x in out)
    k = load * cluster_gpus * span / gpu_s
    for x in out:
        x["duration_s"] = round(max(x["duration_s"] * k, 60.0), 1)
        x["max_runtime_s"] = max(math.ceil(x["max_runtime_s"] * k), math.ceil(x["duration_s"]))
    return sorted(out, key=lambda x: (x["submit_s"], x["id"]))
