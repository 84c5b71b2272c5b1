"""Typed views of API v1 responses (DESIGN.md, "Public API v1").

These are *read* models: they accept extra fields (the API may grow; a newer server must not
break an older client) and default what a server may leave out. Times are parsed to aware
``datetime``. Nothing here is sent back to the server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shunter.jobspec.plan import Plan
from shunter.jobspec.vocab import TERMINAL_STATUSES

__all__ = [
    "TERMINAL_STATUSES",
    "Checkpoint",
    "Cluster",
    "ClusterNode",
    "DryRun",
    "Event",
    "IssuedToken",
    "Job",
    "JobError",
    "MetricPoint",
    "NodeCordon",
    "Page",
    "Progress",
    "QueueEntry",
    "StreamEvent",
    "Sweep",
    "Team",
    "TeamBudget",
    "TeamUsage",
    "TokenInfo",
    "Trial",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WhoAmI",
]

T = TypeVar("T")


class _Read(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Progress(_Read):
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None

    @property
    def fraction(self) -> float | None:
        """step / total_steps in [0, 1], or None when the total is unknown."""
        if not self.total_steps or self.total_steps <= 0:
            return None
        return max(0.0, min(1.0, (self.step or 0) / self.total_steps))


class JobError(_Read):
    type: str
    message: str = ""


class Job(_Read):
    id: str
    name: str = ""
    team: str | None = None
    status: str
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 0
    spec: dict[str, Any] = Field(default_factory=dict)  # {} in list pages (no ?include=spec)
    queue_position: int | None = None
    pending_reason: str | None = None
    estimated_start_at: datetime | None = None  # queued: the scheduler's start ETA
    estimated_start_p90_at: datetime | None = None  # queued: 9 in 10 start by then
    estimated_end_at: datetime | None = None  # running: its end ETA
    # queued: when position, reason and ETA were computed; stale: the last tick did not
    # reach the job (deeper than the scheduler's plan depth), so they are older
    estimated_at: datetime | None = None
    estimate_stale: bool = False
    progress: Progress | None = None
    latest_metrics: dict[str, Any] | None = None
    error: JobError | None = None
    latest_checkpoint: Any = None
    final_model_uri: str | None = None
    restarts: int = 0  # worker-group restarts in the current attempt (spec.max_restarts bounds)

    @field_validator("spec", mode="before")
    @classmethod
    def _no_spec_in_lists(cls, value: Any) -> Any:
        return {} if value is None else value  # list pages carry summaries only

    @property
    def terminal(self) -> bool:
        """True once the job can no longer change (succeeded, failed or cancelled)."""
        return self.status in TERMINAL_STATUSES


class DryRun(_Read):
    """``POST /v1/jobs?dry_run=true``: the spec as the server would queue it, and its plan."""

    spec: dict[str, Any]
    plan: Plan


class Page(_Read, Generic[T]):
    """One page of a cursor-paginated list: ``{"data": [...], "next_cursor": ...}``."""

    data: list[T]
    next_cursor: str | None = None


class Event(_Read):
    id: Any = None
    type: str | None = None
    from_status: str | None = None
    to_status: str | None = None
    message: str | None = None
    attempt: int | None = None
    time: datetime | None = None


class MetricPoint(_Read):
    id: int | None = None
    attempt: int | None = None
    step: int
    name: str
    value: float | None
    time: datetime | None = None


class Checkpoint(_Read):
    id: Any = None
    step: int
    uri: str
    bytes: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    verified: bool = False


class QueueEntry(_Read):
    """One queued job: the job's fields plus its place in line and why it waits."""

    id: str | None = None  # None: another team's job, shown only as capacity (anonymous)
    anonymous: bool = False
    name: str | None = None
    team: str | None = None
    position: int | None = None
    pending_reason: str | None = None
    estimated_start_at: datetime | None = None
    estimated_start_p90_at: datetime | None = None
    estimated_at: datetime | None = None
    estimate_stale: bool = False
    priority: str | None = None
    created_at: datetime | None = None
    num_workers: int | None = None
    cpus_per_worker: float | None = None
    gpus_per_worker: float | None = None


class ClusterNode(_Read):
    node_id: str = ""
    address: str = ""
    alive: bool = True
    total_cpus: float = 0
    free_cpus: float = 0
    total_gpus: float = 0
    free_gpus: float = 0
    accelerator: str = ""
    node_group: str = ""


class TypeCapacity(_Read):
    nodes: int = 0
    total_gpus: float = 0
    free_gpus: float = 0
    memory_gb: float | None = None
    weight: float = 1.0


class Cluster(_Read):
    total_cpus: float = 0
    free_cpus: float = 0
    total_gpus: float = 0
    free_gpus: float = 0
    nodes: list[ClusterNode] = Field(default_factory=list)
    by_type: dict[str, TypeCapacity] = Field(default_factory=dict)


class WhoAmI(_Read):
    team: str | None = None
    role: str
    name: str | None = None
    token_id: Any = None


class Team(_Read):
    id: Any = None
    name: str
    quota: Any = None
    weight: float | None = None
    max_priority: str | None = None
    budget: TeamBudget | None = None


class TeamBudget(_Read):
    """A team's budget and the current period's use, in hours (``*_left`` None: unlimited)."""

    gpu_hours: float | None = None
    cpu_hours: float | None = None
    period: str = "month"
    starts: datetime | None = None
    mode: str = "hard"
    period_start: datetime | None = None
    period_end: datetime | None = None
    gpu_hours_used: float = 0.0
    cpu_hours_used: float = 0.0
    gpu_hours_left: float | None = None
    cpu_hours_left: float | None = None
    exceeded: bool = False


class TeamUsage(_Read):
    team: str
    since: datetime | None = None
    until: datetime | None = None
    gpu_seconds: float = 0.0
    cpu_seconds: float = 0.0
    attempts: int = 0
    owed_share_seconds: float = 0.0  # fair share's account: > 0 owed to the team
    budget: TeamBudget | None = None  # the team's budget this period (None: no budget)


class TokenInfo(_Read):
    id: Any
    team: str | None = None
    role: str
    name: str = ""
    created_at: datetime | None = None
    revoked_at: datetime | None = None


class IssuedToken(TokenInfo):
    """A freshly issued token: ``token`` is the plaintext, shown this once only."""

    token: str


class StreamEvent(_Read):
    """One Server-Sent Event from ``/v1/jobs/{id}/metrics/stream``.

    ``event`` is the SSE event name (``metric``, ``status``, ``end``, ...); ``data`` its
    decoded JSON. ``point`` is set for metric events, ``status`` for status changes.
    """

    event: str
    data: Any = None
    point: MetricPoint | None = None
    status: str | None = None


class Trial(_Read):
    """One trial of a sweep: its job, the sampled parameters, and its objective."""

    number: int
    job_id: str
    status: str
    params: dict[str, Any] = Field(default_factory=dict)
    objective: float | None = None
    objective_step: int | None = None
    best_value: float | None = None
    best_step: int | None = None
    pruned_at_step: int | None = None
    created_at: datetime | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Sweep(_Read):
    """A sweep (``GET /v1/sweeps/{id}``): its trials, and the best finished one."""

    id: str
    name: str
    team: str | None = None
    status: str
    message: str = ""
    objective: str
    direction: str
    max_trials: int
    max_parallel: int
    sampler: str | None = None
    pruner: str | None = None
    definition: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    finished_at: datetime | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    gpu_hours_used: float = 0.0
    cpu_hours_used: float = 0.0
    trials: list[Trial] = Field(default_factory=list)
    best_trial: Trial | None = None

    @property
    def terminal(self) -> bool:
        return self.status in ("succeeded", "failed", "cancelled")


class WebhookEndpoint(_Read):
    """A team's webhook receiver (``/v1/webhooks/endpoints``). ``secret`` is set only in the
    answer to a create or a rotation (shown once)."""

    id: str
    team: str
    url: str
    description: str = ""
    events: list[str] = Field(default_factory=list)
    enabled: bool = True
    disabled_at: datetime | None = None
    disabled_reason: str | None = None
    failures: int = 0
    failing_since: datetime | None = None
    previous_secret_valid_until: datetime | None = None
    created_at: datetime | None = None
    secret: str | None = None


class WebhookDelivery(_Read):
    """One event for one endpoint (``/v1/webhooks/deliveries``); ``id`` is its
    ``webhook-id``, the same on every retry and re-send."""

    id: str
    event_id: str = ""
    endpoint_id: str
    team: str
    job_id: str
    type: str
    status: str
    attempts: int = 0
    next_attempt_at: datetime | None = None
    last_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    delivered_at: datetime | None = None
    created_at: datetime | None = None


class NodeCordon(_Read):
    """A node the straggler watch flagged; ``cordoned``: left out of placement until
    ``cordoned_until``."""

    node_id: str
    node_ip: str = ""
    cordoned: bool = False
    cordoned_until: datetime | None = None
    flags: int = 0
    total_flags: int = 0
    last_flagged_at: datetime | None = None
    last_job_id: str | None = None
    reason: str = ""
