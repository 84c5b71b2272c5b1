"""API v1 request and response schemas (pydantic). Separate from the DB models on purpose:
these are the public contract (DESIGN.md "Public API v1"); the models are storage.

Times are RFC 3339 UTC; SQLite hands back naive datetimes, which ``Utc`` reads as UTC.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "CheckpointIn",
    "CheckpointRead",
    "CheckpointsPage",
    "ClusterRead",
    "ErrorBody",
    "EventRead",
    "EventsPage",
    "HeartbeatIn",
    "HeartbeatOut",
    "InternalSpec",
    "JobError",
    "JobRead",
    "JobsPage",
    "LogsRead",
    "MetricPointIn",
    "MetricRead",
    "MetricsAccepted",
    "MetricsIn",
    "MetricsPage",
    "NodeRead",
    "Progress",
    "QueueItem",
    "QueuePage",
    "Quota",
    "StatusIn",
    "TeamCreate",
    "TeamRead",
    "TeamsPage",
    "TokenCreate",
    "TokenCreated",
    "TokenRead",
    "TokensPage",
    "Utc",
    "WhoAmI",
]


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Utc = Annotated[datetime, AfterValidator(_as_utc)]
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9._-]*$")]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class ErrorBody(_Out):
    detail: Any
    message: str


# --- jobs -------------------------------------------------------------------------------


class Progress(_Out):
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None


class JobError(_Out):
    type: str
    message: str


class JobRead(_Out):
    id: str
    name: str
    team: str
    status: str
    priority: str
    created_at: Utc
    started_at: Utc | None
    finished_at: Utc | None
    attempt: int
    spec: dict[str, Any]
    queue_position: int | None = None
    pending_reason: str | None = None
    progress: Progress | None = None
    latest_metrics: dict[str, Any] | None = None
    error: JobError | None = None
    latest_checkpoint: dict[str, Any] | None = None
    final_model_uri: str | None = None
    resume_from: str | None = None
    cancel_requested: bool = False
    created_by: str | None = None


class JobsPage(_Out):
    data: list[JobRead]
    next_cursor: str | None


class EventRead(_Out):
    id: int
    time: Utc
    from_status: str | None
    to_status: str | None
    type: str
    message: str
    attempt: int | None


class EventsPage(_Out):
    data: list[EventRead]
    next_cursor: str | None


class MetricRead(_Out):
    id: int
    attempt: int
    step: int
    name: str
    value: float
    time: Utc


class MetricsPage(_Out):
    data: list[MetricRead]
    next_cursor: str | None


class CheckpointRead(_Out):
    id: int
    attempt: int
    step: int
    uri: str
    bytes: int
    metrics: dict[str, Any]
    created_at: Utc
    verified: bool


class CheckpointsPage(_Out):
    data: list[CheckpointRead]
    next_cursor: str | None


class LogsRead(_Out):
    text: str
    submission_id: str | None


class QueueItem(_Out):
    position: int
    id: str
    name: str
    team: str
    priority: str
    created_at: Utc
    pending_reason: str | None
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float


class QueuePage(_Out):
    data: list[QueueItem]


class NodeRead(_Out):
    node_id: str
    address: str
    alive: bool
    total_cpus: float
    free_cpus: float
    total_gpus: float
    free_gpus: float


class ClusterRead(_Out):
    nodes: list[NodeRead]
    total_cpus: float
    free_cpus: float
    total_gpus: float
    free_gpus: float


# --- teams and tokens -------------------------------------------------------------------


class Quota(_In):
    max_gpus: float | None = Field(default=None, ge=0, le=1e6)
    max_cpus: float | None = Field(default=None, ge=0, le=1e7)
    max_running_jobs: int | None = Field(default=None, ge=0, le=1_000_000)


class TeamCreate(_In):
    name: Name
    quota: Quota | None = None
    weight: float = Field(default=1.0, gt=0, le=1000)


class TeamRead(_Out):
    name: str
    quota: Quota | None
    weight: float
    created_at: Utc


class TeamsPage(_Out):
    data: list[TeamRead]


class TokenCreate(_In):
    team: Name
    role: Literal["admin", "member", "viewer"]
    name: str = Field(min_length=1, max_length=127)


class TokenRead(_Out):
    id: str
    team: str
    role: str
    name: str
    created_at: Utc
    revoked_at: Utc | None


class TokenCreated(_Out):
    id: str
    token: str  # shown once; only its hash is stored
    team: str
    role: str
    name: str


class TokensPage(_Out):
    data: list[TokenRead]


class WhoAmI(_Out):
    token_id: str
    team: str
    role: str
    name: str


# --- internal (driver -> API) -----------------------------------------------------------


class InternalSpec(_Out):
    job_id: str
    attempt: int
    spec: dict[str, Any]
    output_dir: str
    resume_from: str | None


class HeartbeatIn(_In):
    pass


class HeartbeatOut(_Out):
    lease_expires_at: Utc
    cancel_requested: bool


class StatusIn(_In):
    status: Literal["running", "succeeded", "failed"]
    error: JobError | None = None
    final_model_uri: str | None = Field(default=None, max_length=4096)


class MetricPointIn(_In):
    step: int = Field(ge=0, le=2**62)
    name: str = Field(min_length=1, max_length=127)
    # Non-finite values (a diverged loss) are accepted on input and skipped when stored:
    # SQLite cannot hold NaN and JSON cannot carry it back.
    value: float
    time: Utc | None = None

    @property
    def finite(self) -> bool:
        return math.isfinite(self.value)


class MetricsIn(_In):
    points: list[MetricPointIn] = Field(max_length=100_000)
    progress: Progress | None = None


class MetricsAccepted(_Out):
    accepted: int
    skipped_non_finite: int = 0


class CheckpointIn(_In):
    step: int = Field(ge=0, le=2**62)
    uri: str = Field(min_length=1, max_length=4096)
    bytes: int = Field(ge=0, le=2**62)
    metrics: dict[str, Any] = Field(default_factory=dict)
    verified: bool = False
