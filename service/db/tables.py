"""SQLAlchemy 2.x models: the schema of the job queue.

Invariants the database itself enforces (not just the code):

- job status, attempt status, token role and priority are CHECK-constrained;
- at most one ``active`` attempt per job (partial unique index, SQLite and PostgreSQL);
- one metric point per (job, attempt, step, name); one idempotency key per (team, key).

Times are stored as UTC. SQLite returns them naive; readers treat naive as UTC
(``service.schemas.utc``). Migrations in ``migrations/`` are the only way the schema changes;
``tests/service/test_migrations.py`` proves they match these models.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from shunter.jobspec.vocab import EVENT_TYPES, JOB_STATUSES, PRIORITIES, WEBHOOK_EVENT_TYPES

__all__ = [
    "ACTIVE",
    "ATTEMPT_STATUSES",
    "BUDGET_MODES",
    "BUDGET_PERIODS",
    "DELIVERY_STATUSES",
    "JOB_STATUSES",
    "PRIORITIES",
    "ROLES",
    "STOP_CAUSES",
    "SWEEP_STATUSES",
    "Attempt",
    "AuditLog",
    "Base",
    "ChangeCounter",
    "Checkpoint",
    "Event",
    "File",
    "FineTuningJob",
    "IdempotencyKey",
    "Job",
    "MetricPoint",
    "ObjectRef",
    "SchedulerLease",
    "Sweep",
    "SweepTrial",
    "Team",
    "TeamDataRoot",
    "TeamObject",
    "Token",
    "WebhookDelivery",
    "WebhookEndpoint",
    "utcnow_py",
]

# JOB_STATUSES and PRIORITIES (CHECK constraints) are the API's words, from the pure
# ``shunter.jobspec.vocab`` (never from domain code). The migrations keep their own literal
# copies: a migration is history and must not change when this list does.
# preempted: checkpointed and stopped on request (preemption or pause); not a failure.
ATTEMPT_STATUSES = ("active", "succeeded", "failed", "cancelled", "lost", "preempted")
STOP_CAUSES = ("preempt", "pause", "prune")  # prune: a sweep's pruner stopped the trial
BUDGET_PERIODS = ("week", "month")
BUDGET_MODES = ("hard", "soft")  # soft: past the budget, new jobs queue at ``low``
SWEEP_STATUSES = ("running", "succeeded", "cancelled", "failed")
ACTIVE = "active"
ROLES = ("admin", "member", "viewer")
FILE_PURPOSES = ("fine-tune",)
OBJECT_KINDS = ("dataset", "model")
DELIVERY_STATUSES = ("pending", "delivered", "failed")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def utcnow_py() -> datetime:
    """Python-side UTC now, for times where the database clock does not matter."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: DateTime(timezone=True), dict[str, Any]: JSON}


class AuditLog(Base):
    """Who did what that leaves no other trace (a deleted job, a gc run). Append-only; no
    foreign keys, so a row outlives the job it names."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_time", "time"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(default=utcnow_py)
    actor: Mapped[str] = mapped_column(String(127))  # token name (or "gc")
    actor_team: Mapped[str | None] = mapped_column(String(63))
    action: Mapped[str] = mapped_column(String(63))  # "job.delete", ...
    target: Mapped[str] = mapped_column(String(127))  # the job id
    target_team: Mapped[str | None] = mapped_column(String(63))
    detail: Mapped[str] = mapped_column(Text, default="")


class Team(Base):
    __tablename__ = "teams"
    __table_args__ = (
        CheckConstraint(_in("max_priority", PRIORITIES), name="max_priority"),
        CheckConstraint(
            f"budget_period IS NULL OR {_in('budget_period', BUDGET_PERIODS)}", name="budget_period"
        ),
        CheckConstraint(
            f"budget_mode IS NULL OR {_in('budget_mode', BUDGET_MODES)}", name="budget_mode"
        ),
    )

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    # Quota: None = unlimited.
    max_gpus: Mapped[float | None] = mapped_column(Float)
    max_cpus: Mapped[float | None] = mapped_column(Float)
    max_running_jobs: Mapped[int | None] = mapped_column(Integer)
    # GPUs it may hold per accelerator type, {"h100": 8} (issue 30; migration 0022).
    max_gpus_by_type: Mapped[dict[str, float] | None] = mapped_column(JSON)
    # The highest priority its members may submit at (admins may submit at any).
    max_priority: Mapped[str] = mapped_column(String(8), default="normal", server_default="normal")
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)
    # Fair share: share-seconds the team is owed (negative: owes), as of ``owed_at``; advanced
    # by the scheduler leader each tick (``service.scheduler.owed``).
    owed_s: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    owed_at: Mapped[datetime | None] = mapped_column()
    # Budget (``service.accounts.budgets``): resource-hours per period, counted from
    # ``budget_starts``; a limit left None is not limited. No period = no budget.
    budget_gpu_hours: Mapped[float | None] = mapped_column(Float)
    budget_cpu_hours: Mapped[float | None] = mapped_column(Float)
    budget_period: Mapped[str | None] = mapped_column(String(8))
    budget_starts: Mapped[datetime | None] = mapped_column()
    budget_mode: Mapped[str | None] = mapped_column(String(8))


class TeamDataRoot(Base):
    """A data root only ``team`` may read (added by an admin), beside the global
    ``SHUNTER_DATA_ROOTS``. ``path`` is absolute and symlink-free."""

    __tablename__ = "team_data_roots"

    team: Mapped[str] = mapped_column(
        ForeignKey("teams.name", ondelete="CASCADE"), primary_key=True
    )
    path: Mapped[str] = mapped_column(String(4096), primary_key=True)
    created_by: Mapped[str | None] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


class ChangeCounter(Base):
    """SQLite's change counter (row ``changes``): the triggers of migration 0017 bump it and
    stamp each written job or attempt with it. Unused on PostgreSQL (transaction ids)."""

    __tablename__ = "change_counters"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


class SchedulerLease(Base):
    """The scheduler leader's lease (one row per lease name), on the database clock.

    ``epoch`` grows by one at every change of holder; each placement transaction checks that
    the row still names this holder and epoch and has not expired (``scheduler.leader``), so
    a deposed leader's claims are refused."""

    __tablename__ = "scheduler_leases"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(BigInteger)
    expires_at: Mapped[datetime] = mapped_column()  # database clock
    acquired_at: Mapped[datetime] = mapped_column()  # database clock


class Token(Base):
    __tablename__ = "tokens"
    __table_args__ = (CheckConstraint(_in("role", ROLES), name="role"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of plaintext
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)
    revoked_at: Mapped[datetime | None] = mapped_column()


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_in("status", JOB_STATUSES), name="status"),
        CheckConstraint(_in("priority", PRIORITIES), name="priority"),
        Index("ix_jobs_team_id", "team", "id"),
        Index("ix_jobs_status_created", "status", "created_at"),
        Index("ix_jobs_status_queue_position", "status", "queue_position"),
        Index("ix_jobs_status_priority", "status", "priority"),
        Index("ix_jobs_change_seq", "change_seq"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "job-<sortable>"
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"))
    name: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16))
    priority: Mapped[str] = mapped_column(String(8))
    spec: Mapped[dict[str, Any]] = mapped_column()  # the resolved JobSpec
    created_by: Mapped[str | None] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow_py)
    started_at: Mapped[datetime | None] = mapped_column()
    finished_at: Mapped[datetime | None] = mapped_column()
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # attempts claimed so far
    infra_retries: Mapped[int] = mapped_column(Integer, default=0)  # since submit/resume
    # Resource request, copied from spec.resources so the scheduler need not parse JSON.
    num_workers: Mapped[int] = mapped_column(Integer)
    cpus_per_worker: Mapped[float] = mapped_column(Float)
    gpus_per_worker: Mapped[float] = mapped_column(Float)
    progress_step: Mapped[int | None] = mapped_column(Integer)
    progress_total_steps: Mapped[int | None] = mapped_column(Integer)
    progress_epoch: Mapped[float | None] = mapped_column(Float)
    latest_metrics: Mapped[dict[str, Any] | None] = mapped_column()
    latest_checkpoint: Mapped[dict[str, Any] | None] = mapped_column()
    resume_from: Mapped[str | None] = mapped_column(Text)
    error_type: Mapped[str | None] = mapped_column(String(63))
    error_message: Mapped[str | None] = mapped_column(Text)
    final_model_uri: Mapped[str | None] = mapped_column(Text)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    pending_reason: Mapped[str | None] = mapped_column(Text)  # written by the scheduler
    # Written by the scheduler each tick for queued jobs (submit/resume write a first value),
    # so a GET reads them instead of re-deriving the queue order. 1-based; None unless queued.
    queue_position: Mapped[int | None] = mapped_column(Integer)
    estimated_start_at: Mapped[datetime | None] = mapped_column()
    # The late end of the start's range: 9 in 10 jobs start by then (issue 30, migration 0020).
    estimated_start_p90_at: Mapped[datetime | None] = mapped_column()
    estimated_end_at: Mapped[datetime | None] = mapped_column()
    # When the scheduler last computed the position, reason and ETA of this queued job, and
    # whether the last tick did not reach it (past SHUNTER_SCHEDULER_MAX_PLAN_DEPTH: it keeps
    # its last values until a later tick does).
    estimated_at: Mapped[datetime | None] = mapped_column()
    queue_stale: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Ray Train worker-group restarts inside the current attempt (what max_restarts bounds).
    restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Set by a trigger on every insert and update (migration 0017): the scheduler's snapshot
    # re-reads only the rows changed since its last read (``service.scheduler.changes``).
    change_seq: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # The team objects and bucket URIs the spec names, resolved at submit (service.objects):
    # {"ds-...": {"uri", "digest", "kind", "format", "file", "files"}, "s3://...": {...}};
    # the driver localizes them (payload["inputs"]). None: the spec names none.
    inputs: Mapped[dict[str, Any] | None] = mapped_column()
    # What the user sent, defaults written out (GET /v1/jobs/{id}/spec; a clone's start), and
    # the reproduction record (service.jobs.reproduce). None on jobs older than migration 0019.
    submitted_spec: Mapped[dict[str, Any] | None] = mapped_column()
    record: Mapped[dict[str, Any] | None] = mapped_column()


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (
        CheckConstraint(_in("status", ATTEMPT_STATUSES), name="status"),
        CheckConstraint(
            f"stop_cause IS NULL OR {_in('stop_cause', STOP_CAUSES)}", name="stop_cause"
        ),
        UniqueConstraint("job_id", "number", name="uq_attempts_job_number"),
        # The invariant "at most one active attempt per job", held by the database.
        Index(
            "uq_attempts_one_active",
            "job_id",
            unique=True,
            sqlite_where=text("status = 'active'"),
            postgresql_where=text("status = 'active'"),
        ),
        Index("ix_attempts_status_lease", "status", "lease_expires_at"),
        Index("ix_attempts_change_seq", "change_seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    submission_id: Mapped[str] = mapped_column(String(80))
    lease_expires_at: Mapped[datetime] = mapped_column()  # database clock
    started_at: Mapped[datetime] = mapped_column()  # database clock
    ended_at: Mapped[datetime | None] = mapped_column()
    # The accelerator type the scheduler placed it on (None: untyped); migration 0022.
    accelerator: Mapped[str | None] = mapped_column(String(64))
    # The width it runs at (an elastic job's attempts differ; None: older than migration
    # 0023, the job's ``num_workers``).
    num_workers: Mapped[int | None] = mapped_column(Integer)
    end_reason: Mapped[str | None] = mapped_column(Text)
    # A checkpoint-now request (service.jobs.checkpoint_now): when (database clock), why, detail.
    stop_requested_at: Mapped[datetime | None] = mapped_column()
    stop_cause: Mapped[str | None] = mapped_column(String(16))
    stop_detail: Mapped[str | None] = mapped_column(Text)
    # Set by a trigger when a column the scheduler's snapshot reads changes (not on lease
    # renewals): ``service.scheduler.changes``.
    change_seq: Mapped[int] = mapped_column(BigInteger, server_default="0")


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_job_id_id", "job_id", "id"),
        CheckConstraint(_in("type", EVENT_TYPES), name="type"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[datetime] = mapped_column(default=utcnow_py)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    type: Mapped[str] = mapped_column(String(63))
    message: Mapped[str] = mapped_column(Text, default="")
    attempt: Mapped[int | None] = mapped_column(Integer)


class MetricPoint(Base):
    __tablename__ = "metrics"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt", "step", "name", name="uq_metrics_point"),
        Index("ix_metrics_job_id_id", "job_id", "id"),
        Index("ix_metrics_job_name_id", "job_id", "name", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(127))
    value: Mapped[float] = mapped_column(Float)
    time: Mapped[datetime] = mapped_column()


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt", "step", name="uq_checkpoints_job_attempt_step"),
        Index("ix_checkpoints_job_id_id", "job_id", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(BigInteger)
    uri: Mapped[str] = mapped_column(Text)
    bytes: Mapped[int] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, Any]] = mapped_column()
    verified: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("team", "key", name="uq_idempotency_keys_team_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"))
    key: Mapped[str] = mapped_column(String(255))
    body_sha256: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


class File(Base):
    """An uploaded file (OpenAI's ``/v1/files``): the bytes live at ``path`` under storage."""

    __tablename__ = "files"
    __table_args__ = (
        CheckConstraint(_in("purpose", FILE_PURPOSES), name="purpose"),
        Index("ix_files_team_id", "team", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "file-<sortable>"
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"))
    filename: Mapped[str] = mapped_column(String(255))
    purpose: Mapped[str] = mapped_column(String(32))
    bytes: Mapped[int] = mapped_column(BigInteger)
    lines: Mapped[int] = mapped_column(Integer)  # JSONL examples
    path: Mapped[str] = mapped_column(Text)
    created_by: Mapped[str | None] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


class FineTuningJob(Base):
    """What an OpenAI fine-tuning request said beyond the JobSpec it became (one per job).

    The job itself (status, events, checkpoints) is the ``jobs`` row; file ids are kept as
    given (no foreign key: OpenAI lets a file be deleted after its job was created).
    """

    __tablename__ = "fine_tuning_jobs"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    model: Mapped[str] = mapped_column(String(255))
    training_file: Mapped[str] = mapped_column(String(40))
    validation_file: Mapped[str | None] = mapped_column(String(40))
    suffix: Mapped[str | None] = mapped_column(String(64))
    hyperparameters: Mapped[dict[str, Any]] = mapped_column()  # resolved n_epochs, batch, lr x
    user_metadata: Mapped[dict[str, Any] | None] = mapped_column()  # OpenAI's ``metadata``
    seed: Mapped[int] = mapped_column(BigInteger)


class Sweep(Base):
    """A hyperparameter sweep (``service.sweeps``): its definition as submitted (space,
    objective, sampler, pruner, budget; ``definition``), the validated base spec, and its
    state. Its trials are ordinary jobs of ``team`` (``SweepTrial``)."""

    __tablename__ = "sweeps"
    __table_args__ = (
        CheckConstraint(_in("status", SWEEP_STATUSES), name="status"),
        Index("ix_sweeps_team_id", "team", "id"),
        Index("ix_sweeps_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "swp-<sortable>"
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"))
    name: Mapped[str] = mapped_column(String(63))
    status: Mapped[str] = mapped_column(String(16))
    definition: Mapped[dict[str, Any]] = mapped_column()
    base: Mapped[dict[str, Any]] = mapped_column()  # the base spec as submitted (pass 1 ok)
    max_trials: Mapped[int] = mapped_column(Integer)
    max_parallel: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)  # the sampler's seed
    message: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_by: Mapped[str | None] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)
    finished_at: Mapped[datetime | None] = mapped_column()


class SweepTrial(Base):
    """One trial: its number in the sweep, its job, and the parameters sampled for it.
    Written in the same transaction as the job, so a trial is never sampled twice or lost;
    ``params_sha256`` (unique per sweep) makes a duplicate sample impossible."""

    __tablename__ = "sweep_trials"
    __table_args__ = (UniqueConstraint("sweep_id", "params_sha256", name="uq_sweep_trials_params"),)

    sweep_id: Mapped[str] = mapped_column(
        ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    params: Mapped[dict[str, Any]] = mapped_column()
    params_sha256: Mapped[str] = mapped_column(String(64))
    # Optuna's per-trial system attributes (a grid sampler's grid id, ASHA's completed
    # rungs): the studies are rebuilt from these rows each pass (``service.sweeps.study``).
    optuna_attrs: Mapped[dict[str, Any]] = mapped_column()
    checked_step: Mapped[int | None] = mapped_column(BigInteger)  # pruner has seen up to here
    pruned_at_step: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


class WebhookEndpoint(Base):
    """A team's webhook receiver (``service.webhooks``). ``events``: the types it gets for
    every job of the team (a job's ``notify:`` adds types for that job). ``secret`` signs;
    after a rotation ``previous_secret`` signs too until ``previous_secret_until``. A 410 or
    a long run of failures disables it (``disabled_at``, ``disabled_reason``)."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (UniqueConstraint("team", "url", name="uq_webhook_endpoints_team_url"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "whe_<hex>"
    team: Mapped[str] = mapped_column(ForeignKey("teams.name", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(String(2048))
    description: Mapped[str] = mapped_column(String(255), default="")
    events: Mapped[list[str]] = mapped_column(JSON)
    secret: Mapped[str] = mapped_column(String(128))
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_secret_until: Mapped[datetime | None] = mapped_column()
    disabled_at: Mapped[datetime | None] = mapped_column()
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    # Consecutive failed attempts (any delivery) and when the run of failures began.
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    failing_since: Mapped[datetime | None] = mapped_column()
    created_by: Mapped[str | None] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


class WebhookDelivery(Base):
    """The outbox: one row per (endpoint, event), written in the transaction that records the
    event. ``msg_id`` (the ``webhook-id`` header) is unique and the same on every retry;
    ``body`` is the exact payload sent. A sender claims a due row by a conditional UPDATE
    (``claimed_until`` on the database clock), so two processes never send it at once."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint(_in("status", DELIVERY_STATUSES), name="status"),
        CheckConstraint(_in("type", WEBHOOK_EVENT_TYPES), name="type"),
        UniqueConstraint("endpoint_id", "event_key", name="uq_webhook_deliveries_endpoint_event"),
        Index("ix_webhook_deliveries_status_next", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_team_id", "team", "id"),
        Index("ix_webhook_deliveries_job_id", "job_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    msg_id: Mapped[str] = mapped_column(String(40), unique=True)  # "msg_<hex>"
    endpoint_id: Mapped[str] = mapped_column(ForeignKey("webhook_endpoints.id", ondelete="CASCADE"))
    team: Mapped[str] = mapped_column(String(63))
    job_id: Mapped[str] = mapped_column(String(40))  # no foreign key: outlives a deleted job
    event_key: Mapped[str] = mapped_column(String(127))  # "event-<events.id>", "checkpoint-..."
    type: Mapped[str] = mapped_column(String(31))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_attempt_at: Mapped[datetime] = mapped_column()  # database clock
    claimed_until: Mapped[datetime | None] = mapped_column()  # database clock
    claim_token: Mapped[str | None] = mapped_column(String(32))
    last_attempt_at: Mapped[datetime | None] = mapped_column()
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


class NodeCordon(Base):
    """A Ray node the straggler watch flagged (``service.health.straggler``). ``flags``: its
    ``straggler`` events since it was last cordoned; at ``SHUNTER_STRAGGLER_CORDON_AFTER``
    flags it is cordoned until ``cordoned_until`` (the scheduler places nothing on it before
    then) and ``flags`` starts again at 0. ``total_flags`` never resets."""

    __tablename__ = "node_cordons"

    node_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    node_ip: Mapped[str] = mapped_column(String(255), default="")
    flags: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    total_flags: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    last_flagged_at: Mapped[datetime | None] = mapped_column()
    last_job_id: Mapped[str | None] = mapped_column(String(40))
    cordoned_until: Mapped[datetime | None] = mapped_column()
    reason: Mapped[str] = mapped_column(Text, default="")


class TeamObject(Base):
    """A team's dataset or base model (``service.objects``): its bytes are the object
    ``objects/<digest>/`` in storage (``storage.layout``), shared by every row with that
    digest. ``deleted_at`` set: removed by the team (hidden); the bytes stay while a job's
    ``object_refs`` row or another live row names the digest."""

    __tablename__ = "team_objects"
    __table_args__ = (
        CheckConstraint(_in("kind", OBJECT_KINDS), name="kind"),
        Index("ix_team_objects_team_id", "team", "id"),
        Index("ix_team_objects_digest", "digest"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # "ds-..." or "mdl-..."
    team: Mapped[str] = mapped_column(ForeignKey("teams.name"))
    name: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    digest: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(32))  # jsonl | json | csv | tsv | txt | parquet | hf
    columns: Mapped[list[Any]] = mapped_column(JSON)
    rows: Mapped[int | None] = mapped_column(BigInteger)
    sample: Mapped[list[Any]] = mapped_column(JSON)  # a few rows (datasets) / config (models)
    files: Mapped[list[Any]] = mapped_column(JSON)  # relative paths in the object
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_by: Mapped[str | None] = mapped_column(String(127))
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)
    deleted_at: Mapped[datetime | None] = mapped_column()


class ObjectRef(Base):
    """A job uses an object: its bytes live until the job is deleted (the row goes with it)."""

    __tablename__ = "object_refs"
    __table_args__ = (Index("ix_object_refs_digest", "digest"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    object_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
