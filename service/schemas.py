"""API v1 request and response schemas (pydantic). Separate from the DB models on purpose:
these are the public contract (DESIGN.md "Public API v1"); the models are storage.

Times are RFC 3339 UTC; SQLite hands back naive datetimes, which ``Utc`` reads as UTC.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from service.db.sqltime import as_utc
from shunter.jobspec.plan import Plan
from shunter.jobspec.vocab import Priority, WebhookEventType

__all__ = [
    "Budget",
    "BudgetRead",
    "CheckpointIn",
    "CheckpointRead",
    "CheckpointsPage",
    "ClusterRead",
    "DataRootIn",
    "DataRootsRead",
    "ErrorBody",
    "EventRead",
    "EventsPage",
    "GcIn",
    "GcRead",
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
    "RestartIn",
    "StatusIn",
    "SweepRead",
    "SweepsPage",
    "TeamCreate",
    "TeamPatch",
    "TeamRead",
    "TeamUsageRead",
    "TeamsPage",
    "TokenCreate",
    "TokenCreated",
    "TokenRead",
    "TokensPage",
    "TrialRead",
    "Utc",
    "WebhookDeliveriesPage",
    "WebhookDeliveryRead",
    "WebhookEndpointCreate",
    "WebhookEndpointCreated",
    "WebhookEndpointPatch",
    "WebhookEndpointRead",
    "WebhookEndpointsPage",
    "WebhookSecretRotated",
    "WhoAmI",
    "WorkerIn",
]


def _as_utc(value: datetime) -> datetime:
    return as_utc(value).astimezone(UTC)  # naive (SQLite) is UTC; aware ones are converted


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
    # null in list pages unless ?include=spec (GET /v1/jobs/{id} always has it)
    spec: dict[str, Any] | None = None
    queue_position: int | None = None
    pending_reason: str | None = None
    # The scheduler's ETAs (each tick): a queued job's start, by running the same policy
    # forward; a running job's end, from its step rate and max_runtime. None = unknown.
    estimated_start_at: Utc | None = None
    # The late end of the start's range: about 9 in 10 queued jobs start by then.
    estimated_start_p90_at: Utc | None = None
    estimated_end_at: Utc | None = None
    # A queued job: when the scheduler computed its position, reason and ETA; ``stale``
    # when the last tick did not reach it (deeper than SHUNTER_SCHEDULER_MAX_PLAN_DEPTH).
    estimated_at: Utc | None = None
    estimate_stale: bool = False
    progress: Progress | None = None
    latest_metrics: dict[str, Any] | None = None
    error: JobError | None = None
    latest_checkpoint: dict[str, Any] | None = None
    final_model_uri: str | None = None
    resume_from: str | None = None
    cancel_requested: bool = False
    created_by: str | None = None
    # Ray Train worker-group restarts in the current attempt; spec.max_restarts bounds them.
    restarts: int = 0


class CloneIn(_In):
    """``POST /v1/jobs/{id}/clone``: the job's submitted spec with these changes, submitted."""

    # dotted field -> value, e.g. {"training.learning_rate": 1e-4}; validated like a submit
    overrides: dict[str, Any] = Field(default_factory=dict, max_length=256)
    # start from this verified checkpoint of the job (model.init_from; weights only)
    from_checkpoint: Literal["latest", "best"] | Annotated[int, Field(ge=1)] | None = None


class JobRecordRead(_Out):
    """``GET /v1/jobs/{id}/record``: what a job ran with (``service.jobs.reproduce``)."""

    job_id: str
    # code_version, seed, model/tokenizer/data fingerprints; ``run``: the driver's report of
    # the versions where the last attempt ran. null for a job stored before records existed.
    record: dict[str, Any] | None


class DryRunRead(_Out):
    """``POST /v1/jobs?dry_run=true``: the spec as it would be queued and how it would run."""

    spec: dict[str, Any]
    plan: Plan


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


def checkpoint_id(step: int, attempt: int) -> str:
    """A checkpoint's id in the list: the name its download route takes (``step-N@A``)."""
    return f"step-{step}@{attempt}"


class CheckpointRead(_Out):
    # "step-<step>@<attempt>": GET /v1/jobs/{id}/checkpoints/{this id}/download sends it
    id: str
    attempt: int
    step: int
    uri: str
    bytes: int
    metrics: dict[str, Any]
    created_at: Utc
    verified: bool

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """From a ``checkpoints`` row: its id is the name, not the row's key."""
        if isinstance(data, dict):
            return data
        fields = {name: getattr(data, name) for name in cls.model_fields if name != "id"}
        return {**fields, "id": checkpoint_id(data.step, data.attempt)}


class CheckpointsPage(_Out):
    data: list[CheckpointRead]
    next_cursor: str | None


class LogsRead(_Out):
    """One page of an attempt's output (``GET /v1/jobs/{id}/logs``), by byte range."""

    text: str
    submission_id: str | None
    attempt: int | None = None  # the attempt this page is from (None: no attempt yet)
    attempts: list[int] = Field(default_factory=list)  # attempts with stored output
    offset: int = 0  # byte offset of ``text`` in the attempt's output
    next_offset: int = 0  # ask for this offset to read on
    first_offset: int = 0  # oldest byte still stored (older were rotated out by the cap)
    size: int = 0  # bytes of output stored so far for the attempt
    truncated: bool = False  # the offset asked for was rotated out
    source: Literal["store", "launcher", "none"] = "none"  # launcher: a live fallback


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


# --- sweeps ---------------------------------------------------------------------------


class TrialRead(_Out):
    """One trial of a sweep: an ordinary job (``job_id``) and the parameters sampled for it.
    ``objective``: the objective at the trial's last evaluation (what Optuna is told when it
    finishes); ``best_value`` / ``best_step``: its best evaluation."""

    number: int
    job_id: str
    status: str
    params: dict[str, Any]
    objective: float | None = None
    objective_step: int | None = None
    best_value: float | None = None
    best_step: int | None = None
    pruned_at_step: int | None = None
    created_at: Utc


class SweepRead(_Out):
    id: str
    name: str
    team: str
    status: str
    message: str = ""
    objective: str  # the metric point name, e.g. eval_accuracy
    direction: str
    max_trials: int
    max_parallel: int
    sampler: str
    pruner: str
    definition: dict[str, Any]  # the body as submitted (base, space, settings, budget)
    created_by: str | None
    created_at: Utc
    finished_at: Utc | None
    counts: dict[str, int]  # trials by job status
    gpu_hours_used: float = 0.0  # what the trials held (the sweep's own budget counts this)
    cpu_hours_used: float = 0.0
    trials: list[TrialRead] = Field(default_factory=list)
    # The finished trial with the best objective (its model: GET /v1/jobs/{job_id}/...).
    best_trial: TrialRead | None = None


class SweepsPage(_Out):
    data: list[SweepRead]
    next_cursor: str | None = None


# --- teams and tokens -------------------------------------------------------------------


class Quota(_In):
    max_gpus: float | None = Field(default=None, ge=0, le=1e6)
    max_cpus: float | None = Field(default=None, ge=0, le=1e7)
    max_running_jobs: int | None = Field(default=None, ge=0, le=1_000_000)


class Budget(_In):
    """A team's spending budget (``service.accounts.budgets``): GPU- and/or CPU-hours that its
    attempts may hold per ``period``, periods counted from ``starts`` (default: when set). Past
    it, ``hard``: new submits get 403; ``soft``: they queue at ``low`` priority."""

    gpu_hours: float | None = Field(default=None, ge=0, le=1e9)
    cpu_hours: float | None = Field(default=None, ge=0, le=1e10)
    period: Literal["week", "month"] = "month"
    starts: Utc | None = None
    mode: Literal["hard", "soft"] = "hard"

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if self.gpu_hours is None and self.cpu_hours is None:
            raise ValueError(
                "give gpu_hours or cpu_hours (or both); to remove a budget send budget: null"
            )
        return self


class BudgetRead(_Out):
    """A team's budget now: its limits and the current period's use (hours)."""

    gpu_hours: float | None
    cpu_hours: float | None
    period: str
    starts: Utc
    mode: str
    period_start: Utc  # the current period: [period_start, period_end)
    period_end: Utc
    gpu_hours_used: float
    cpu_hours_used: float
    gpu_hours_left: float | None  # None: that resource is not limited
    cpu_hours_left: float | None
    exceeded: bool


class TeamCreate(_In):
    name: Name
    quota: Quota | None = None
    weight: float = Field(default=1.0, gt=0, le=1000)
    max_priority: Priority = "normal"


class TeamPatch(_In):
    """Admin changes to a team; fields left out are unchanged. In ``quota``, a field given
    as null means unlimited; fields left out keep their value. Applies on the next tick."""

    weight: float | None = Field(default=None, gt=0, le=1000)
    quota: Quota | None = None
    max_priority: Priority | None = None
    budget: Budget | None = None  # given as null: the team has no budget any more


class TeamRead(_Out):
    name: str
    quota: Quota | None
    weight: float
    max_priority: str = "normal"
    created_at: Utc
    budget: BudgetRead | None = None


class TeamUsageRead(_Out):
    """Resource-seconds a team's attempts held between ``since`` and ``until``."""

    team: str
    since: Utc
    until: Utc
    gpu_seconds: float
    cpu_seconds: float
    attempts: int
    # The fair-share owed account now (``service.scheduler.owed``): share-seconds of the
    # cluster fair share still owes the team (negative: the team owes them). 3600 = the
    # whole cluster for an hour.
    owed_share_seconds: float = 0.0
    # The team's budget and the current period's use (None: no budget).
    budget: BudgetRead | None = None


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
    # Run time of the job's earlier attempts (claim to end; queued time excluded): the driver
    # enforces max_runtime_seconds over the whole job, not per attempt.
    runtime_used_s: float = 0.0
    # Ray node ids the straggler watch has cordoned now (service.jobs.straggler): the driver's
    # ScalingConfig label selector keeps this attempt's workers off them.
    avoid_nodes: list[str] = Field(default_factory=list)
    # The team objects and bucket files the spec names, resolved at submit (jobs.inputs):
    # {"ds-...": {uri, digest, kind, format, delimiter, file, files}, "mdl-...": {...},
    #  "s3://...": {kind: "uri", ...}}; the driver localizes them through the node cache.
    inputs: dict[str, Any] = Field(default_factory=dict)


class HeartbeatIn(_In):
    pass


class HeartbeatOut(_Out):
    lease_expires_at: Utc
    cancel_requested: bool
    # Checkpoint at the next step boundary and stop (preemption or pause); why, in words.
    checkpoint_now: bool = False
    stop_cause: Literal["preempt", "pause", "prune"] | None = None
    stop_detail: str | None = None


class StatusIn(_In):
    # preempted: the attempt checkpointed at ``step`` on a checkpoint-now request and stopped.
    status: Literal["running", "succeeded", "failed", "preempted"]
    error: JobError | None = None
    final_model_uri: str | None = Field(default=None, max_length=4096)
    step: int | None = Field(default=None, ge=0, le=2**62)
    # With ``running``: where the attempt runs (``shunter.provenance.installed_versions``):
    # {code_version, python, packages: {name: version}}; stored in the job's record as ``run``.
    versions: dict[str, str | dict[str, str]] | None = Field(default=None, max_length=16)


class RestartIn(_In):
    """Ray Train restarted the worker group inside this attempt (a worker died)."""

    rank: int | None = Field(default=None, ge=0, le=1_000_000)  # the lost worker's world rank
    node: str | None = Field(default=None, max_length=255)  # its node (IP or Ray node id)
    cause: str = Field(min_length=1, max_length=2000)
    resumed_from_step: int = Field(ge=0, le=2**62)  # 0 = from scratch


class PhaseIn(_In):
    """Rank 0 reached a start-up phase (``service.jobs.phases``) at ``time``."""

    phase: Literal["workers_up", "model_built", "first_step"]
    time: Utc


class WorkerIn(_In):
    """One Ray Train worker of this attempt, at its start: where its process is, so the hang
    watch can dump its stacks on its node (``service.jobs.hang``)."""

    rank: int = Field(ge=0, le=1_000_000)  # world rank
    pid: int = Field(ge=1, le=2**31)
    node_id: str = Field(min_length=1, max_length=128, pattern=r"^[0-9A-Za-z_-]+$")
    node_ip: str = Field(default="", max_length=255)


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


class DataRootIn(_In):
    path: str = Field(min_length=1, max_length=4096, description="absolute directory")


class DataRootsRead(_Out):
    team: str
    roots: list[str]  # beside SHUNTER_DATA_ROOTS, which every team may read


class GcIn(_In):
    older_than: str = Field(
        min_length=2, max_length=16, description="age of finished jobs to delete, e.g. 30d, 12h"
    )
    dry_run: bool = False


class GcRead(_Out):
    job_ids: list[str]  # past retention
    deleted: list[str]  # empty on a dry run
    dry_run: bool


class CheckpointIn(_In):
    step: int = Field(ge=0, le=2**62)
    uri: str = Field(min_length=1, max_length=4096)
    bytes: int = Field(ge=0, le=2**62)
    metrics: dict[str, Any] = Field(default_factory=dict)
    verified: bool = False


# --- webhooks ---------------------------------------------------------------------------


class WebhookEndpointCreate(_In):
    """A team's receiver. ``events``: the types it gets for every job of the team (empty:
    only for jobs whose ``notify:`` names its URL)."""

    team: Name | None = None  # admins may name another team; default: the caller's
    url: str = Field(min_length=1, max_length=2048)
    events: list[WebhookEventType] = Field(default_factory=lambda: list(get_args(WebhookEventType)))
    description: str = Field("", max_length=255)


class WebhookEndpointPatch(_In):
    events: list[WebhookEventType] | None = None
    description: str | None = Field(None, max_length=255)
    enabled: bool | None = None  # true re-enables a disabled endpoint (failures reset)


class WebhookEndpointRead(_Out):
    id: str
    team: str
    url: str
    description: str
    events: list[str]
    enabled: bool
    disabled_at: Utc | None
    disabled_reason: str | None
    failures: int  # consecutive failed attempts
    failing_since: Utc | None
    previous_secret_valid_until: Utc | None  # during a rotation
    created_by: str | None
    created_at: Utc


class WebhookEndpointCreated(WebhookEndpointRead):
    secret: str  # whsec_...; shown once


class WebhookSecretRotated(_Out):
    id: str
    secret: str  # the new whsec_...; shown once
    previous_secret_valid_until: Utc  # the old one signs too until then


class WebhookEndpointsPage(_Out):
    data: list[WebhookEndpointRead]


class WebhookDeliveryRead(_Out):
    id: str  # the webhook-id header (msg_...): the same on every retry and re-send
    event_id: str  # the payload's id (evt_...): the same for every endpoint
    endpoint_id: str
    team: str
    job_id: str
    type: str
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    next_attempt_at: Utc | None  # pending only
    last_attempt_at: Utc | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: Utc | None
    created_at: Utc


class WebhookDeliveriesPage(_Out):
    data: list[WebhookDeliveryRead]
    next_cursor: str | None


# --- straggler watch: flagged and cordoned nodes ---------------------------------------


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
