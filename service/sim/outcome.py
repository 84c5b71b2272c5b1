"""What a simulation reports: each job's runs, preemptions and first estimates, and the
summary (``service.sim.report.summarize``), with the policy's decision time per tick and, on a
typed cluster, each accelerator type's use. Pure: it reads the engine's final state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.policy.accelerators import AcceleratorType
from service.sim.model import JobState, SimConfig, SimTeam
from service.sim.report import Interval, summarize

__all__ = ["by_type", "outcome", "spread"]


def spread(xs: Sequence[float]) -> dict[str, float | int]:
    """p50, p99 and max of the policy's decision time per tick (wall seconds)."""
    s = sorted(xs)
    if not s:
        return {"ticks": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))], 6)

    return {"ticks": len(s), "p50": at(0.5), "p99": at(0.99), "max": round(s[-1], 6)}


def by_type(
    states: Mapping[str, JobState],
    catalog: Mapping[str, AcceleratorType],
    rejected: Mapping[str, str],
    span: float,
) -> dict[str, Any]:
    """Per accelerator type (a typed cluster only): its GPUs, the GPU-seconds jobs ran on
    it (in all and per team, ``team_gpu_s``), its utilisation over the makespan, the jobs
    that ran on it; and the jobs no type could hold (rejected, as submit rejects them live)."""
    if not catalog:
        return {}
    used: dict[str, float] = {}
    ran: dict[str, set[str]] = {}
    teams: dict[str, dict[str, float]] = {}  # type -> team -> GPU-seconds
    for st in states.values():
        for (t, gpus), (a, b) in zip(st.run_types, st.runs, strict=False):
            used[t] = used.get(t, 0.0) + gpus * (b - a)
            ran.setdefault(t, set()).add(st.job.id)
            per = teams.setdefault(t, {})
            per[st.job.team] = per.get(st.job.team, 0.0) + gpus * (b - a)
    out = {
        t: {
            "gpus": c.gpus,
            "memory_gb": c.memory_gb,
            "gpu_s": round(used.get(t, 0.0), 1),
            "utilisation_overall": round(used.get(t, 0.0) / (c.gpus * span), 4)
            if c.gpus and span
            else None,
            "jobs": len(ran.get(t, ())),
            "team_gpu_s": {k: round(v, 1) for k, v in sorted(teams.get(t, {}).items())},
        }
        for t, c in sorted(catalog.items())
    }
    return {"by_type": out, "rejected": dict(sorted(rejected.items()))}


def outcome(
    *,
    cfg: SimConfig,
    states: Mapping[str, JobState],
    intervals: list[Interval],
    teams: Mapping[str, SimTeam],
    total_cpus: float,
    total_gpus: float,
    tick_s: Sequence[float],
    skipped: int,
    catalog: Mapping[str, AcceleratorType],
    rejected: Mapping[str, str],
) -> dict[str, Any]:
    """``{"jobs": [...], "summary": {...}}``: each job's runs, preemptions and first
    estimates, and the run's summary (``report.summarize``), decision times and, on a typed
    cluster, the use of each type."""
    jobs = [
        {
            "id": st.job.id,
            "team": st.job.team,
            "submit_s": st.job.submit_s,
            "runs": st.runs,
            "preemptions": st.preemptions,
            **({"accelerators": [t for t, _ in st.run_types]} if catalog else {}),
            **({"resizes": st.resizes} if st.resizes else {}),
            "estimated_start_s": st.estimate,
            "estimated_start_p90_s": st.estimate_p90,
        }
        for st in sorted(states.values(), key=lambda s: (s.job.submit_s, s.job.id))
    ]
    summary = summarize(
        jobs,
        intervals,
        weights={t: s.weight for t, s in teams.items()},
        total_cpus=total_cpus,
        total_gpus=total_gpus,
    )
    return {
        "jobs": jobs,
        "summary": {
            "policy": cfg.policy,
            **summary,
            "decision_s": {**spread(tick_s), "skipped_ticks": skipped},
            **by_type(states, catalog, rejected, summary["makespan_s"]),
            **(
                {"resizes": sum(len(st.resizes) for st in states.values())}
                if any(st.line.min_workers is not None for st in states.values())
                else {}
            ),
        },
    }
