"""Queue policy: the order queued jobs are placed in and why each one waits. Pure functions.

Order: priority (high > normal > low), then submission time, then id. Placement is gang:
all of a job's workers fit on the free nodes now, or none start. A job that does not fit
now is skipped and a smaller job behind it that fits starts (backfill, as issue #4 asks); the
skipped job's reason names the job that went ahead. A job waiting for its own team's quota
blocks nobody else either.
The scheduler calls ``order_queue`` each tick and stores each job's ``reason``;
``GET /v1/queue`` shows the same decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

__all__ = [
    "PRIORITY_RANK",
    "NodeFree",
    "QueueDecision",
    "QueueEntry",
    "TeamQuota",
    "TeamUsage",
    "order_queue",
    "place_gang",
    "sort_key",
]

PRIORITY_RANK: Mapping[str, int] = {"high": 0, "normal": 1, "low": 2}
_WAITING = "waiting for resources"


@dataclass(frozen=True, kw_only=True)
class QueueEntry:
    job_id: str
    team: str
    priority: str
    created_at: datetime
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float

    @property
    def cpus(self) -> float:
        return self.num_workers * self.cpus_per_worker

    @property
    def gpus(self) -> float:
        return self.num_workers * self.gpus_per_worker


@dataclass(frozen=True, kw_only=True)
class NodeFree:
    node_id: str
    cpus: float
    gpus: float


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """None = unlimited."""

    max_gpus: float | None = None
    max_cpus: float | None = None
    max_running_jobs: int | None = None


@dataclass(frozen=True, kw_only=True)
class TeamUsage:
    running_jobs: int = 0
    cpus: float = 0.0
    gpus: float = 0.0


@dataclass(frozen=True, kw_only=True)
class QueueDecision:
    entry: QueueEntry
    position: int  # 1-based
    start_now: bool
    reason: str | None  # why it waits; None when start_now
    placement: list[str] = field(default_factory=list)  # node id per worker when start_now


def sort_key(entry: QueueEntry) -> tuple[int, datetime, str]:
    return (PRIORITY_RANK.get(entry.priority, 1), entry.created_at, entry.job_id)


def place_gang(entry: QueueEntry, nodes: Sequence[NodeFree]) -> list[str] | None:
    """Place every worker on some node (first fit, fullest-first); None if any does not fit."""
    free = {n.node_id: [n.cpus, n.gpus] for n in nodes}
    order = sorted(free, key=lambda nid: (free[nid][1], free[nid][0]))
    out: list[str] = []
    for _ in range(entry.num_workers):
        for nid in order:
            cpus, gpus = free[nid]
            if cpus >= entry.cpus_per_worker and gpus >= entry.gpus_per_worker:
                free[nid] = [cpus - entry.cpus_per_worker, gpus - entry.gpus_per_worker]
                out.append(nid)
                break
        else:
            return None
    return out


def _quota_reason(entry: QueueEntry, usage: TeamUsage, quota: TeamQuota | None) -> str | None:
    if quota is None:
        return None
    if quota.max_running_jobs is not None and usage.running_jobs + 1 > quota.max_running_jobs:
        return f"team quota: {usage.running_jobs}/{quota.max_running_jobs} jobs running"
    if quota.max_gpus is not None and usage.gpus + entry.gpus > quota.max_gpus:
        return f"team quota: needs {entry.gpus:g} GPUs, {usage.gpus:g}/{quota.max_gpus:g} in use"
    if quota.max_cpus is not None and usage.cpus + entry.cpus > quota.max_cpus:
        return f"team quota: needs {entry.cpus:g} CPUs, {usage.cpus:g}/{quota.max_cpus:g} in use"
    return None


def _take(nodes: list[NodeFree], placement: list[str], entry: QueueEntry) -> list[NodeFree]:
    used = {nid: placement.count(nid) for nid in set(placement)}
    return [
        replace(
            n,
            cpus=n.cpus - used.get(n.node_id, 0) * entry.cpus_per_worker,
            gpus=n.gpus - used.get(n.node_id, 0) * entry.gpus_per_worker,
        )
        for n in nodes
    ]


def order_queue(
    entries: Sequence[QueueEntry],
    nodes: Sequence[NodeFree],
    *,
    usage: Mapping[str, TeamUsage] | None = None,
    quotas: Mapping[str, TeamQuota] | None = None,
) -> list[QueueDecision]:
    """Decide, in policy order, which queued jobs start now and why the others wait."""
    usage = dict(usage or {})
    quotas = quotas or {}
    free = list(nodes)
    out: list[QueueDecision] = []
    for pos, entry in enumerate(sorted(entries, key=sort_key), start=1):
        team_usage = usage.get(entry.team, TeamUsage())
        reason = _quota_reason(entry, team_usage, quotas.get(entry.team))
        placement: list[str] | None = None
        if reason is None:
            placement = place_gang(entry, free)
            if placement is None:
                reason = (
                    f"{_WAITING}: needs {entry.num_workers} x "
                    f"({entry.cpus_per_worker:g} CPU, {entry.gpus_per_worker:g} GPU) at once"
                )
        if placement is not None:
            free = _take(free, placement, entry)
            usage[entry.team] = TeamUsage(
                running_jobs=team_usage.running_jobs + 1,
                cpus=team_usage.cpus + entry.cpus,
                gpus=team_usage.gpus + entry.gpus,
            )
        out.append(
            QueueDecision(
                entry=entry,
                position=pos,
                start_now=placement is not None,
                reason=reason,
                placement=placement or [],
            )
        )
    return _note_skips(out)


def _note_skips(decisions: list[QueueDecision]) -> list[QueueDecision]:
    """On each job waiting for resources, name the job behind it that starts instead."""
    out = list(decisions)
    for i, d in enumerate(decisions):
        if d.start_now or not (d.reason or "").startswith(_WAITING):
            continue
        ahead = [b.entry.job_id for b in decisions[i + 1 :] if b.start_now]
        if ahead:
            more = f" (+{len(ahead) - 1} more)" if len(ahead) > 1 else ""
            note = f"skipped for now: {ahead[0]}{more}, behind it, fits and starts"
            out[i] = replace(d, reason=f"{d.reason}; {note}")
    return out
