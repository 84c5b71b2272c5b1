"""Jobs: a job, its record, events, metrics, checkpoints and logs (``/v1/jobs``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from service.schemas.base import Utc, _In, _Out
from shunter.jobspec.plan import Plan

__all__ = [
    "AttemptRead",
    "AttemptsPage",
    "CheckpointRead",
    "CheckpointsPage",
    "CloneIn",
    "DryRunRead",
    "EventRead",
    "EventsPage",
    "JobError",
    "JobRead",
    "JobRecordRead",
    "JobsPage",
    "LogsRead",
    "MetricRead",
    "MetricsPage",
    "Progress",
]


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


class AttemptRead(_Out):
    """One attempt of a job (``GET /v1/jobs/{id}/attempts``): an elastic job's attempts run
    at the widths the scheduler chose (``num_workers``; null: older than widths)."""

    number: int
    status: str
    num_workers: int | None
    accelerator: str | None
    started_at: Utc
    ended_at: Utc | None
    end_reason: str | None


class AttemptsPage(_Out):
    data: list[AttemptRead]


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
