"""Builders for policy snapshots in tests (times in seconds after T0)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.policy.capacity import NodeFree
from service.policy.snapshot import ActiveJob, QueueEntry, Snapshot, TeamState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def job(
    job_id: str,
    *,
    team: str = "a",
    priority: str = "normal",
    t: float = 0,
    workers: int = 1,
    cpus: float = 1,
    gpus: float = 0,
    max_runtime_s: float | None = None,
    preemptible: bool = True,
) -> QueueEntry:
    return QueueEntry(
        job_id=job_id,
        team=team,
        priority=priority,
        created_at=at(t),
        num_workers=workers,
        cpus_per_worker=cpus,
        gpus_per_worker=gpus,
        max_runtime_s=max_runtime_s,
        preemptible=preemptible,
    )


def running(
    entry: QueueEntry, *, started: float = 0, end: float | None = None, preempting: bool = False
) -> ActiveJob:
    return ActiveJob(
        entry=entry,
        started_at=at(started),
        expected_end_at=None if end is None else at(end),
        preempting=preempting,
    )


def snapshot(
    *,
    now: float,
    nodes: list[tuple[float, float]],
    queued: list[QueueEntry],
    active: list[ActiveJob] | None = None,
    teams: dict[str, TeamState] | None = None,
) -> Snapshot:
    """``nodes``: (cpus, gpus) totals; free now = totals minus the active jobs packed."""
    from service.policy.reservations import Holder, free_at

    totals = [NodeFree(node_id=f"n{i}", cpus=c, gpus=g) for i, (c, g) in enumerate(nodes)]
    active = active or []
    free = free_at(totals, [Holder(entry=a.entry, end_at=None) for a in active], at(now))
    return Snapshot(
        now=at(now), totals=totals, free=free, queued=queued, active=active, teams=teams or {}
    )
