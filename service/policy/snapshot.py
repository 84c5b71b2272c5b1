"""What the scheduling policy sees: one immutable snapshot of the cluster, queue and teams.

Built by ``service.scheduler.snapshot_reader`` from the database and the launcher for the live loop,
and by ``service.sim.engine`` from a trace on a virtual clock; ``policy.planner`` reads only
this. Times are timezone-aware datetimes; ``Snapshot.now`` is the only clock the policy has.
Resources: CPUs and GPUs as floats (Ray's units).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from service.policy.capacity import NodeFree
from service.policy.queue_entry import QueueEntry, queue_entry
from service.policy.queue_index import QueueIndex
from shunter.jobspec.vocab import PRIORITY_RANK  # lower rank = more important

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
class ActiveJob:
    """A job holding resources now (claimed, running or cancelling)."""

    entry: QueueEntry
    started_at: datetime  # the current attempt's start
    # When it is expected to end: step rate x remaining steps, bounded by max_runtime;
    # None = unknown (no step rate yet and no max_runtime).
    expected_end_at: datetime | None = None
    # Asked to checkpoint and stop already: its resources free soon; never picked twice.
    preempting: bool = False
    # The accelerator type it runs on ("" = untyped or unknown): per-type quotas count it.
    accelerator: str = ""


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """None = unlimited."""

    max_gpus: float | None = None
    max_cpus: float | None = None
    max_running_jobs: int | None = None
    # GPUs the team may hold per accelerator type (a type not named: only ``max_gpus``).
    max_gpus_by_type: Mapping[str, float] | None = None


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
    # it must hold exactly ``queued``. None: ``policy.planner`` builds it.
    index: QueueIndex | None = None
    # ``capacity.pack(totals, [a.entry for a in active])`` when the caller has it already
    # (the simulator's free view): the ETA forward run reuses it.
    active_packing: tuple[list[NodeFree], list[list[str] | None]] | None = None
    # Per team (running jobs, CPUs, GPUs) held by ``active``, when the caller keeps the sums
    # (the simulator); None: ``policy.planner`` adds them up.
    held: Mapping[str, tuple[int, float, float]] | None = None
    # Never-fits reasons by gang shape for these ``totals``, kept by a caller whose totals do
    # not change (the simulator); ``policy.planner`` fills it. None: one per plan.
    never_fits: dict[tuple[int, float, float, tuple[str, ...]], str | None] | None = None
    # Per accelerator type the weight its GPUs count with in fair shares (the admin's
    # ``SHUNTER_ACCELERATOR_TYPES``; a type left out counts 1): ``fairshare.GpuTypes``.
    type_weights: Mapping[str, float] | None = None
