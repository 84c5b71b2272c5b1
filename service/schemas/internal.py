"""The internal API: what a job's driver sends and gets (``/v1/internal``, docs/contracts.md)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from service.schemas.base import Utc, _In, _Out
from service.schemas.jobs import JobError, Progress

__all__ = [
    "CheckpointIn",
    "DataRootIn",
    "DataRootsRead",
    "GcIn",
    "GcRead",
    "HeartbeatIn",
    "HeartbeatOut",
    "InternalSpec",
    "MetricPointIn",
    "MetricsAccepted",
    "MetricsIn",
    "PhaseIn",
    "RestartIn",
    "StatusIn",
    "WorkerIn",
]


class InternalSpec(_Out):
    job_id: str
    attempt: int
    spec: dict[str, Any]
    output_dir: str
    resume_from: str | None
    # Run time of the job's earlier attempts (claim to end; queued time excluded): the driver
    # enforces max_runtime_seconds over the whole job, not per attempt.
    runtime_used_s: float = 0.0
    # Ray node ids the straggler watch has cordoned now (service.health.straggler): the driver's
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
    # The restart's number inside the attempt (1 = the first): a repeat of a number already
    # recorded (a replayed or re-sent report) writes nothing. None (older workers): counted.
    seq: int | None = Field(default=None, ge=1, le=1_000_000)


class PhaseIn(_In):
    """Rank 0 reached a start-up phase (``service.jobs.phases``) at ``time``."""

    phase: Literal["workers_up", "model_built", "first_step"]
    time: Utc


class WorkerIn(_In):
    """One Ray Train worker of this attempt, at its start: where its process is, so the hang
    watch can dump its stacks on its node (``service.health.hang``)."""

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
