"""Simulator inputs: read cluster/teams/trace files, and generate synthetic traces.

Formats (``docs/scheduling.md``):

- cluster: ``{"nodes": [{"gpus": 8, "cpus": 64}, ...]}``; a node may say its
  ``"accelerator"`` type, ``"gpu_memory_gb"`` (a mixed cluster) and ``"weight"`` (its
  type's weight in the fair shares, as ``SHUNTER_ACCELERATOR_TYPES``' ``weight``)
- teams: ``{"team": {"weight": 2, "quota_gpus": 16, "max_priority": "high"}, ...}``, with
  ``"quota_gpus_by_type": {"h100": 8}`` per accelerator type
- trace (JSONL), one job a line: ``{"id", "team", "submit_s", "num_workers",
  "gpus_per_worker", "cpus_per_worker", "duration_s", "max_runtime_s", "priority",
  "min_workers" (elastic: it runs on min_workers..num_workers),
  "preemptible", "accelerator" (a type or a list in order of preference; absent = any),
  "gpu_memory_gb" (the plan's memory per GPU: only types whose card holds it)}``

Errors name the file, the line and the field. ``generate`` draws a trace shaped like the
published Philly and Helios traces: heavy-tailed (log-normal) durations, mostly 1-GPU jobs,
a few large gangs, submissions following a day/night cycle.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from service.policy.accelerators import normalize
from service.sim.engine import SimJob, SimTeam
from shunter.jobspec.vocab import PRIORITY_RANK

__all__ = [
    "TraceError",
    "generate",
    "generate_bursty",
    "generate_busy",
    "generate_contended",
    "load_cluster",
    "load_teams",
    "load_trace",
]


class TraceError(ValueError):
    """A simulator input is malformed; the message names file, line and field."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TraceError(f"{path}: {e}") from None


def _num(
    where: str, obj: dict[str, Any], key: str, *, default: Any = ..., minimum: float = 0.0
) -> Any:
    value = obj.get(key, default)
    if value is ...:
        raise TraceError(f"{where}: {key} is required")
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise TraceError(f"{where}: {key} must be a number >= {minimum:g}, not {value!r}")
    return value


def load_cluster(path: Path) -> list[dict[str, Any]]:
    data = _read_json(path)
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list) or not nodes:
        raise TraceError(f'{path}: expected {{"nodes": [{{"gpus": 8, "cpus": 64}}, ...]}}')
    out = []
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            raise TraceError(f"{path}: nodes[{i}] must be an object")
        where = f"{path}: nodes[{i}]"
        node: dict[str, Any] = {
            "gpus": float(_num(where, n, "gpus", default=0)),
            "cpus": float(_num(where, n, "cpus")),
        }
        if "accelerator" in n:
            if not isinstance(n["accelerator"], str) or not n["accelerator"].strip():
                raise TraceError(f"{where}: accelerator must be a non-empty string")
            node["accelerator"] = normalize(n["accelerator"])
        if "gpu_memory_gb" in n:
            node["gpu_memory_gb"] = float(_num(where, n, "gpu_memory_gb", minimum=1))
        if "weight" in n:
            if "accelerator" not in node:
                raise TraceError(f"{where}: a weight is its accelerator type's: name the type")
            node["weight"] = float(_num(where, n, "weight", minimum=1e-9))
        out.append(node)
    return out


def load_teams(path: Path) -> dict[str, SimTeam]:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise TraceError(f'{path}: expected {{"team": {{"weight": 2, ...}}, ...}}')
    out = {}
    for name, t in data.items():
        where = f"{path}: {name}"
        if not isinstance(t, dict):
            raise TraceError(f"{where} must be an object")
        prio = t.get("max_priority", "high")
        if prio not in PRIORITY_RANK:
            raise TraceError(f"{where}: max_priority must be one of low|normal|high, not {prio!r}")
        weight = _num(where, t, "weight", default=1.0)
        if weight <= 0:
            raise TraceError(f"{where}: weight must be > 0")
        out[name] = SimTeam(
            weight=float(weight),
            quota_gpus=_num(where, t, "quota_gpus", default=None),
            quota_cpus=_num(where, t, "quota_cpus", default=None),
            max_priority=prio,
            quota_gpus_by_type=_by_type(where, t.get("quota_gpus_by_type")),
        )
    return out


def _by_type(where: str, v: Any) -> dict[str, float] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise TraceError(f'{where}: quota_gpus_by_type must be an object {{"h100": 8, ...}}')
    return {normalize(k): float(_num(f"{where}: quota_gpus_by_type", v, k)) for k in sorted(v)}


def _types(where: str, v: Any) -> tuple[str, ...]:
    """``"h100"``, ``["h100", "a100"]`` (in order of preference) or absent (any)."""
    if v is None:
        return ()
    names = [v] if isinstance(v, str) else v
    if not isinstance(names, list) or not all(isinstance(x, str) and x.strip() for x in names):
        raise TraceError(f"{where}: accelerator must be a type name or a list of them")
    return tuple(dict.fromkeys(normalize(x) for x in names))


def _job(where: str, d: dict[str, Any]) -> SimJob:
    for key in ("id", "team"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise TraceError(f"{where}: {key} must be a non-empty string")
    prio = d.get("priority", "normal")
    if prio not in PRIORITY_RANK:
        raise TraceError(f"{where}: priority must be one of low|normal|high, not {prio!r}")
    workers = _num(where, d, "num_workers", default=1, minimum=1)
    if not isinstance(workers, int):
        raise TraceError(f"{where}: num_workers must be an integer")
    preemptible = d.get("preemptible", True)
    if not isinstance(preemptible, bool):
        raise TraceError(f"{where}: preemptible must be true or false")
    least = _num(where, d, "min_workers", default=None, minimum=1)
    if least is not None and (not isinstance(least, int) or least > workers):
        raise TraceError(f"{where}: min_workers must be an integer <= num_workers")
    return SimJob(
        id=d["id"],
        team=d["team"],
        submit_s=float(_num(where, d, "submit_s")),
        num_workers=workers,
        gpus_per_worker=float(_num(where, d, "gpus_per_worker", default=0)),
        cpus_per_worker=float(_num(where, d, "cpus_per_worker", default=1)),
        duration_s=float(_num(where, d, "duration_s")),
        max_runtime_s=_num(where, d, "max_runtime_s", default=None, minimum=1),
        priority=prio,
        preemptible=preemptible,
        accelerators=_types(where, d.get("accelerator")),
        gpu_memory_gb=_num(where, d, "gpu_memory_gb", default=None),
        min_workers=least,
    )


def load_trace(path: Path) -> list[SimJob]:
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise TraceError(f"{path}: {e}") from None
    jobs, seen = [], set()
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: {e}") from None
        if not isinstance(d, dict):
            raise TraceError(f"{where}: each line must be a JSON object")
        job = _job(where, d)
        if job.id in seen:
            raise TraceError(f"{where}: id {job.id!r} appears twice")
        seen.add(job.id)
        jobs.append(job)
    return jobs


def _gpus(rng: random.Random, node_gpus: int) -> tuple[int, float]:
    """(num_workers, gpus_per_worker): mostly 1 GPU, some 2-4, a few whole-node gangs."""
    r = rng.random()
    if r < 0.70:
        return 1, 1.0
    if r < 0.85:
        return 1, 2.0
    if r < 0.93:
        return 1, float(min(4, node_gpus))
    if r < 0.98:
        return 1, float(node_gpus)
    return rng.choice([2, 4]), float(node_gpus)  # a large gang: 2-4 whole nodes


def generate(
    *,
    teams: Sequence[str],
    jobs: int,
    seed: int = 0,
    mean_interarrival_s: float = 120.0,
    median_duration_s: float = 1800.0,
    node_gpus: int = 8,
    cpus_per_gpu: float = 8.0,
) -> list[dict[str, Any]]:
    """A synthetic trace (list of trace-line dicts), deterministic for ``seed``."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    t = 0.0
    day = 86_400.0
    for i in range(jobs):
        # Diurnal: thinning of a Poisson process whose rate peaks mid-day at 3x the night's.
        while True:
            t += rng.expovariate(1.0 / (mean_interarrival_s / 2))
            if rng.random() < (2 + math.sin(2 * math.pi * t / day)) / 3:
                break
        workers, gpw = _gpus(rng, node_gpus)
        duration = min(rng.lognormvariate(math.log(median_duration_s), 1.5), 7 * day)
        bound = None if rng.random() < 0.05 else math.ceil(duration * rng.uniform(1.2, 3.0))
        r = rng.random()
        out.append(
            {
                "id": f"j{i:05d}",
                "team": teams[rng.randrange(len(teams))],
                "submit_s": round(t, 1),
                "num_workers": workers,
                "gpus_per_worker": gpw,
                "cpus_per_worker": gpw * cpus_per_gpu,
                "duration_s": round(max(duration, 30.0), 1),
                "max_runtime_s": bound,
                "priority": "low" if r < 0.1 else "high" if r > 0.95 else "normal",
                "preemptible": rng.random() < 0.95,
            }
        )
    return out


def generate_contended(
    *,
    weights: Mapping[str, float],
    hours: float = 6.0,
    seed: int = 0,
    cluster_gpus: int = 32,
    node_gpus: int = 8,
    cpus_per_gpu: float = 8.0,
    gang_fraction: float = 0.1,
    load: float = 1.5,
) -> list[dict[str, Any]]:
    """A trace where every team keeps work queued for ``hours``: each team submits at
    ``load`` times the rate its weighted share of ``cluster_gpus`` can run, mostly 1-GPU
    jobs, some 2-4 GPU, and a ``gang_fraction`` of whole-node jobs and 2-node gangs.
    Deterministic for ``seed``; the teams' first submits are staggered by a few minutes."""
    rng = random.Random(seed)
    total_w = sum(weights.values())
    sizes = (1, 1, 1, 1, 2, 4)
    durations = (600.0, 1200.0, 1800.0, 2700.0, 3600.0)
    mean_gpus = (
        gang_fraction / 2 * 2 * node_gpus
        + gang_fraction / 2 * node_gpus
        + (1 - gang_fraction) * sum(sizes) / len(sizes)
    )
    mean_gpu_s = mean_gpus * sum(durations) / len(durations)
    out: list[dict[str, Any]] = []
    for k, (team, weight) in enumerate(sorted(weights.items())):
        gpus_share = cluster_gpus * weight / total_w
        t = k * 300.0
        n = 0
        while t < hours * 3600.0:
            r = rng.random()
            if r < gang_fraction / 2:
                workers, gpw = 2, float(node_gpus)
            elif r < gang_fraction:
                workers, gpw = 1, float(node_gpus)
            else:
                workers, gpw = 1, float(rng.choice(sizes))
            duration = rng.choice(durations)
            out.append(
                {
                    "id": f"{team}{n:04d}",
                    "team": team,
                    "submit_s": round(t, 1),
                    "num_workers": workers,
                    "gpus_per_worker": gpw,
                    "cpus_per_worker": gpw * cpus_per_gpu,
                    "duration_s": duration,
                    "max_runtime_s": math.ceil(duration * rng.uniform(1.2, 2.0)),
                    "priority": "normal",
                    "preemptible": True,
                }
            )
            n += 1
            # GPU-seconds submitted per second ~= load x the team's share of the cluster
            # (on average over the mix, so one large job does not leave a long gap).
            t += rng.expovariate(load * gpus_share / mean_gpu_s)
    return sorted(out, key=lambda x: (x["submit_s"], x["id"]))


def generate_busy(
    *,
    weights: Mapping[str, float],
    hours: float = 24.0,
    jobs_per_hour: float = 40.0,
    seed: int = 0,
    median_duration_s: float = 1800.0,
    sigma: float = 1.0,
    node_gpus: int = 8,
    cpus_per_gpu: float = 8.0,
) -> list[dict[str, Any]]:
    """A busy cluster's day (issue #19's trace): every team submits ``jobs_per_hour``
    (Poisson), mostly 1-GPU jobs, some 2- and 4-GPU jobs and whole-node 8-GPU gangs of 1-2
    nodes, log-normal durations around ``median_duration_s``, max_runtime 1.2-3x the work.
    Deterministic for ``seed``."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for team in sorted(weights):
        t, n = 0.0, 0
        while True:
            t += rng.expovariate(jobs_per_hour / 3600.0)
            if t >= hours * 3600.0:
                break
            r = rng.random()
            workers, gpw = (
                (1, 1.0)
                if r < 0.70
                else (1, 2.0)
                if r < 0.85
                else (1, 4.0)
                if r < 0.95
                else (rng.choice([1, 2]), float(node_gpus))
            )
            duration = min(rng.lognormvariate(math.log(median_duration_s), sigma), 86_400.0)
            out.append(
                {
                    "id": f"{team}{n:05d}",
                    "team": team,
                    "submit_s": round(t, 1),
                    "num_workers": workers,
                    "gpus_per_worker": gpw,
                    "cpus_per_worker": gpw * cpus_per_gpu,
                    "duration_s": round(max(duration, 60.0), 1),
                    "max_runtime_s": math.ceil(duration * rng.uniform(1.2, 3.0)),
                    "priority": "normal",
                    "preemptible": True,
                }
            )
            n += 1
    return sorted(out, key=lambda x: (x["submit_s"], x["id"]))


def generate_bursty(
    *,
    weights: Mapping[str, float],
    hours: float = 24.0,
    jobs: int = 2900,
    seed: int = 0,
    cluster_gpus: int = 32,
    load: float = 2.0,
    node_gpus: int = 8,
    cpus_per_gpu: float = 8.0,
) -> list[dict[str, Any]]:
    """A contended day shaped unlike ``generate_busy`` (issue 30's second ETA trace, so the
    ETAs are not tuned to one shape): teams submit unequally (not by weight) and in bursts
    (a sweep of 5-30 alike jobs at once, half the jobs) as well as singly; durations from a
    three-part mix (minutes, hours, most of a day); each team bounds its jobs its own way
    (tight limits 1.05-1.5x the work, loose 2-10x, or a fifth with no limit at all); 1-8
    GPU jobs and 2-node gangs; some high/low priority and non-preemptible jobs. Durations
    are scaled so the GPU-seconds submitted are ``load`` x the cluster's over ``hours``.
    Deterministic for ``seed``; about ``jobs`` lines over ``hours``."""
    rng = random.Random(seed)
    names = sorted(weights)
    styles = ["tight", "loose", "none"]
    style = {t: styles[k % len(styles)] for k, t in enumerate(names)}
    rate_share = {t: rng.uniform(0.5, 2.0) for t in names}  # submits, not weights
    total = sum(rate_share.values())
    span = hours * 3600.0
    out: list[dict[str, Any]] = []

    def one(team: str, t: float, shape: tuple[int, float], duration: float, n: int) -> None:
        s = style[team]
        bound: int | None
        if s == "tight":
            bound = math.ceil(duration * rng.uniform(1.05, 1.5))
        elif s == "loose":
            bound = math.ceil(duration * rng.uniform(2.0, 10.0))
        else:
            bound = None if rng.random() < 0.2 else math.ceil(duration * rng.uniform(1.2, 4.0))
        r = rng.random()
        out.append(
            {
                "id": f"{team}-{n:05d}",
                "team": team,
                "submit_s": round(t, 1),
                "num_workers": shape[0],
                "gpus_per_worker": shape[1],
                "cpus_per_worker": shape[1] * cpus_per_gpu,
                "duration_s": round(max(duration, 60.0), 1),
                "max_runtime_s": bound,
                "priority": "high" if r < 0.05 else "low" if r < 0.15 else "normal",
                "preemptible": rng.random() < 0.9,
            }
        )

    def shape() -> tuple[int, float]:
        r = rng.random()
        if r < 0.65:
            return 1, 1.0
        if r < 0.85:
            return 1, 2.0
        if r < 0.95:
            return 1, 4.0
        if r < 0.99:
            return 1, float(node_gpus)
        return 2, float(node_gpus)

    def duration() -> float:
        r = rng.random()
        if r < 0.7:
            return rng.uniform(300.0, 1800.0)
        if r < 0.97:
            return rng.uniform(3600.0, 3 * 3600.0)
        return rng.uniform(6 * 3600.0, 12 * 3600.0)

    counts = dict.fromkeys(names, 0)
    while len(out) < jobs:
        team = rng.choices(names, weights=[rate_share[t] / total for t in names])[0]
        t = rng.uniform(0.0, span)
        if rng.random() < 0.08:  # a sweep: alike jobs at once
            sh, d = shape(), duration()
            for _ in range(rng.randint(5, 30)):
                one(team, t, sh, d * rng.uniform(0.7, 1.3), counts[team])
                counts[team] += 1
        else:
            one(team, t, shape(), duration(), counts[team])
            counts[team] += 1
    work = sum(x["num_workers"] * x["gpus_per_worker"] * x["duration_s"] for x in out)
    k = load * cluster_gpus * span / work
    for x in out:
        x["duration_s"] = round(max(x["duration_s"] * k, 60.0), 1)
        if x["max_runtime_s"] is not None:
            x["max_runtime_s"] = max(math.ceil(x["max_runtime_s"] * k), math.ceil(x["duration_s"]))
    return sorted(out, key=lambda x: (x["submit_s"], x["id"]))


def data_parallel(
    lines: Sequence[dict[str, Any]], *, elastic: bool, min_fraction: float = 0.5
) -> list[dict[str, Any]]:
    """The same trace with every multi-GPU job as a data-parallel gang of 1-GPU workers
    (``num_workers`` = its GPUs); ``elastic``: each of them ``{min: ceil(min_fraction x n),
    max: n}`` (``min_workers``), its ``max_runtime_s`` scaled by n / min (a whole run at
    min takes that much longer: its user bounds it so). Otherwise the two traces are the
    same, so replaying each compares rigid jobs with elastic ones (``bench/elastic.py``)."""
    out = []
    for x in lines:
        gpus = x["num_workers"] * x["gpus_per_worker"]
        if gpus < 2 or gpus != int(gpus):
            out.append(dict(x))
            continue
        n, cpus = int(gpus), x["cpus_per_worker"] / x["gpus_per_worker"]
        y = dict(x, num_workers=n, gpus_per_worker=1.0, cpus_per_worker=cpus)
        if elastic:  # its bound allows the whole run at min (the user's bound, at worst)
            y["min_workers"] = least = max(1, math.ceil(min_fraction * n))
            if x.get("max_runtime_s") is not None:
                y["max_runtime_s"] = math.ceil(x["max_runtime_s"] * n / least)
        out.append(y)
    return out
