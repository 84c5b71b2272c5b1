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
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "ACTIVE",
    "ATTEMPT_STATUSES",
    "JOB_STATUSES",
    "PRIORITIES",
    "ROLES",
    "Attempt",
    "Base",
    "Checkpoint",
    "Event",
    "IdempotencyKey",
    "Job",
    "MetricPoint",
    "Team",
    "Token",
    "utcnow_py",
]

# Kept here (not imported from states.py) so the schema never depends on domain code.
JOB_STATUSES = ("queued", "starting", "running", "cancelling", "succeeded", "failed", "cancelled")
ATTEMPT_STATUSES = ("active", "succeeded", "failed", "cancelled", "lost")
ACTIVE = "active"
ROLES = ("admin", "member", "viewer")
PRIORITIES = ("low", "normal", "high")

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


class Team(Base):
    __tablename__ = "teams"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    # Quota: None = unlimited.
    max_gpus: Mapped[float | None] = mapped_column(Float)
    max_cpus: Mapped[float | None] = mapped_column(Float)
    max_running_jobs: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow_py)


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


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (
        CheckConstraint(_in("status", ATTEMPT_STATUSES), name="status"),
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
    end_reason: Mapped[str | None] = mapped_column(Text)


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (Index("ix_events_job_id_id", "job_id", "id"),)

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
