"""What the scheduling policy sees: one immutable snapshot of the cluster, queue and teams.

Built by ``service.scheduler.snapshot`` from the database and the launcher for the live loop,
and by ``service.scheduler.sim`` from a trace on a virtual clock; ``policy.plan`` reads only
this. Times are timezone-aware datetimes; ``Snapshot.now`` is the only clock the policy has.
Resources: CPUs and GPUs as floats (Ray's units).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

from service.policy.capacity import Gang, NodeFree
from shunter.jobspec.vocab import PRIORITY_RANK, priority_rank  # lower rank = more important

if TYPE_CHECKING:
    from service.policy.queue_index import QueueIndex

__all__ = [
    "PRIORITY_RANK",
    "ActiveJob",
    "NodeFree",
    "QueueEntry",
    "Snapshot",
    "TeamQuota",
    "TeamState",
    "TeamUsage",
    "queue_entry",
]


@dataclass(frozen=True, kw_only=True)
class QueueEntry:
    """A job as the policy sees it (queued or active)."""

    job_id: str
    team: str
    priority: str
    created_at: datetime
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    # When it last entered the queue (submit, resume or preemption); None = created_at.
    queued_since: datetime | None = None
    # The user's bound on run time across attempts (seconds), and run time already spent.
    max_runtime_s: float | None = None
    run_s: float = 0.0
    preemptible: bool = True

    @property
    def cpus(self) -> float:
        return self.num_workers * self.cpus_per_worker

    @property
    def gpus(self) -> float:
        return self.num_workers * self.gpus_per_worker

    @property
    def waiting_since(self) -> datetime:
        return self.queued_since or self.created_at

    @cached_property
    def order_key(self) -> tuple[int, datetime, str]:
        """(class rank, waiting since, id): the order that does not depend on the teams;
        kept on the entry (an entry is rebuilt when it queues again)."""
        return (priority_rank(self.priority), self.waiting_since, self.job_id)


def queue_entry(
    *,
    job_id: str,
    team: str,
    priority: str,
    gang: Gang,
    created_at: datetime,
    queued_since: datetime | None,
    max_runtime_s: float | None,
    run_s: float,
    preemptible: bool,
) -> QueueEntry:
    """THE one place a job becomes a ``QueueEntry``: the live snapshot (a ``Job`` row and
    its attempts) and the simulator (a trace line and its runs) both call it."""
    return QueueEntry(
        job_id=job_id,
        team=team,
        priority=priority,
        created_at=created_at,
        num_workers=gang.num_workers,
        cpus_per_worker=gang.cpus_per_worker,
        gpus_per_worker=gang.gpus_per_worker,
        queued_since=queued_since,
        max_runtime_s=max_runtime_s,
        run_s=run_s,
        preemptible=preemptible,
    )


@dataclass(frozen=True, kw_only=True)
class ActiveJob:
    """A job holding resources now (claimed, running or cancelling)."""

    entry: QueueEntry
    started_at: datetime  # the current attempt's start
    # When it is expected to end: step rate x remaining steps, bounded by max_runtime;
    # None = unknown (no step rate yet and no max_runtime).
    expected_end_at: datetime | None = None
    # Asked to checkpoint and stop already: its resources free soon; never picked twice.
    preempting: bool = False


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """None = unlimited."""

    max_gpus: float | None = None
    max_cpus: float | None = None
    max_running_jobs: int | None = None


@dataclass(frozen=True, kw_only=True)
class TeamUsage:
    """What a team holds now."""

    running_jobs: int = 0
    cpus: float = 0.0
    gpus: float = 0.0


@dataclass(frozen=True, kw_only=True)
class TeamState:
    weight: float = 1.0
    quota: TeamQuota | None = None
    # Exponentially decayed average of the team's dominant share of the cluster over its
    # recent history (``policy.fairshare.decayed_average``), 0..1: breaks ties in the order.
    history_share: float = 0.0
    # Share-seconds the team is owed (negative: it owes), ``policy.fairshare.advance_owed``.
    owed_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    now: datetime
    totals: list[NodeFree]  # alive nodes, their whole capacity
    free: list[NodeFree]  # alive nodes, what is free now
    queued: Sequence[QueueEntry]
    active: list[ActiveJob] = field(default_factory=list)
    teams: Mapping[str, TeamState] = field(default_factory=dict)
    # ``queued`` per team and shape, when the caller keeps one across ticks (the simulator);
    # it must hold exactly ``queued``. None: ``policy.plan`` builds it.
    index: QueueIndex | None = None
    # ``capacity.pack(totals, [a.entry for a in active])`` when the caller has it already
    # (the simulator's free view): the ETA forward run reuses it.
    active_packing: tuple[list[NodeFree], list[list[str] | None]] | None = None
    # Per team (running jobs, CPUs, GPUs) held by ``active``, when the caller keeps the sums
    # (the simulator); None: ``policy.plan`` adds them up.
    held: Mapping[str, tuple[int, float, float]] | None = None
    # Never-fits reasons by gang shape for these ``totals``, kept by a caller whose totals do
    # not change (the simulator); ``policy.plan`` fills it. None: one per plan.
    never_fits: dict[tuple[int, float, float], str | None] | None = None
