"""What each team holds, as a plan pass counts it (``policy.planner``): ``Tally`` (jobs, CPUs,
GPUs, GPUs per accelerator type), read from the snapshot (``held``) and added to as jobs
start (``add``), and the quota checks on it (``quota_reason``, ``type_quota``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.policy.fairshare import GpuTypes
from service.policy.snapshot import QueueEntry, Snapshot, TeamQuota, TeamUsage

__all__ = ["Tally", "add", "held", "quota_reason", "type_quota"]


class Tally:
    """What a team holds, as ``TeamUsage`` reads, counted in place (one pass adds often)."""

    __slots__ = ("by_type", "cpus", "fair", "gpus", "running_jobs")

    def __init__(self) -> None:
        self.running_jobs, self.cpus, self.gpus = 0, 0.0, 0.0
        self.by_type: dict[str, float] | None = None  # GPUs per accelerator type, when known
        # On a mixed cluster, GPUs per type as fair shares count them (``GpuTypes.charge``).
        self.fair: dict[str, float] | None = None


def quota_reason(
    entry: QueueEntry, usage: TeamUsage | Tally, quota: TeamQuota | None
) -> str | None:
    if quota is None:
        return None
    if quota.max_running_jobs is not None and usage.running_jobs + 1 > quota.max_running_jobs:
        return f"team quota: {usage.running_jobs}/{quota.max_running_jobs} jobs running"
    if quota.max_gpus is not None and usage.gpus + entry.gpus > quota.max_gpus:
        return f"team quota: needs {entry.gpus:g} GPUs, {usage.gpus:g}/{quota.max_gpus:g} in use"
    if quota.max_cpus is not None and usage.cpus + entry.cpus > quota.max_cpus:
        return f"team quota: needs {entry.cpus:g} CPUs, {usage.cpus:g}/{quota.max_cpus:g} in use"
    return None


def held(
    snap: Snapshot, *, by_type: bool = False, types: GpuTypes | None = None
) -> dict[str, Tally]:
    """Per team what its running jobs hold: the snapshot's tallies when it keeps them
    (``by_type``: GPUs per accelerator type too, which only the running jobs say; ``types``:
    a mixed cluster's, for the fair shares per type)."""
    usage: dict[str, Tally] = {}
    if by_type or types is not None:
        for a in snap.active:
            add(usage, a.entry, a.accelerator, types)
        return usage
    if snap.held is not None:
        for team, (jobs, cpus, gpus) in snap.held.items():
            if jobs:
                u = usage[team] = Tally()
                u.running_jobs, u.cpus, u.gpus = jobs, cpus, gpus
        return usage
    for a in snap.active:
        add(usage, a.entry)
    return usage


def add(
    usage: dict[str, Tally],
    e: QueueEntry,
    accelerator: str | None = "",
    types: GpuTypes | None = None,
) -> None:
    """Count ``e`` to its team, on ``accelerator`` (None: not placed yet)."""
    u = usage.get(e.team)
    if u is None:
        u = usage[e.team] = Tally()
    u.running_jobs += 1
    u.cpus += e.num_workers * e.cpus_per_worker
    u.gpus += e.num_workers * e.gpus_per_worker
    if accelerator:
        if u.by_type is None:
            u.by_type = {}
        u.by_type[accelerator] = u.by_type.get(accelerator, 0.0) + e.gpus
    if types is not None:
        if u.fair is None:
            u.fair = {}
        types.charge(u.fair, e.gpus, accelerator, e.accelerators)


def type_quota(
    entry: QueueEntry, usage: Tally, caps: Mapping[str, float], types: Sequence[str]
) -> tuple[tuple[str, ...], str | None]:
    """The types ``entry`` may take within its team's per-type GPU quota (in its order of
    preference; ``types``: the cluster's, for a job that accepts any), or why none."""
    held = usage.by_type or {}
    cands = entry.accelerators or tuple(types)
    ok = tuple(t for t in cands if t not in caps or held.get(t, 0.0) + entry.gpus <= caps[t])
    if ok:
        return ok, None
    over = ", ".join(f"{t} {held.get(t, 0.0):g}/{caps[t]:g}" for t in cands)
    return (), f"team quota per accelerator type: needs {entry.gpus:g} GPUs; in use {over}"
