"""The queue, the cluster and its nodes, and the straggler watch's flagged and cordoned nodes
(``/v1/queue``, ``/v1/cluster``, ``/v1/nodes``).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from service.launch import NodeResources
from service.schemas.base import Utc, _Out

__all__ = [
    "ClusterRead",
    "NodeCordonRead",
    "QueueItem",
    "QueuePage",
    "TypeCapacity",
]


class QueueItem(_Out):
    """A queued job; another team's (for a member) is ``anonymous``: capacity only, with no
    id, name, team, time or reason."""

    position: int
    anonymous: bool = False
    id: str | None = None
    name: str | None = None
    team: str | None = None
    priority: str
    created_at: Utc | None = None
    pending_reason: str | None = None
    estimated_start_at: Utc | None = None
    estimated_start_p90_at: Utc | None = None  # the range's late end (9 in 10 start by it)
    estimated_at: Utc | None = None  # when position, reason and ETA were computed
    estimate_stale: bool = False  # the last tick did not reach it: they are older
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float


class QueuePage(_Out):
    data: list[QueueItem]
    next_cursor: str | None = None


class TypeCapacity(_Out):
    """One accelerator type's capacity over the alive nodes (issue 30)."""

    nodes: int
    total_gpus: float
    free_gpus: float
    memory_gb: float | None = None  # one card's memory, when known
    weight: float = 1.0  # GPU-hours on it count this many times in budgets and usage


class ClusterRead(_Out):
    nodes: list[NodeResources]  # as the launcher reports them (service.launch)
    total_cpus: float
    free_cpus: float
    total_gpus: float
    free_gpus: float
    by_type: dict[str, TypeCapacity] = Field(default_factory=dict)  # "" = untyped GPUs


class NodeCordonRead(_Out):
    node_id: str
    node_ip: str
    cordoned: bool  # placement leaves it out now
    cordoned_until: datetime | None
    flags: int  # straggler flags since its last cordon
    total_flags: int
    last_flagged_at: datetime | None
    last_job_id: str | None
    reason: str
