"""Internal API domain: what a job's driver reports (spec fetch, heartbeat, status, metric
batches, checkpoints), authenticated by the per-attempt token and FENCED: every write first
proves, in its own transaction, that the attempt is still the job's active attempt
(``states.fence_attempt``); otherwise ``StaleAttempt`` (409) and nothing is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.accounts.auth import hash_token
from service.db.sqltime import as_utc
from service.db.tables import Attempt, Checkpoint, Event, Job, MetricPoint, utcnow_py
from service.errors import Unauthorized
from service.jobs.attempt_loss import RETRYABLE_ERRORS, lose_attempt
from service.jobs.checkpoint_now import finish_preempted, stop_request
from service.jobs.confine import confined
from service.jobs.phases import PhaseMark, record_phase
from service.jobs.states import ErrorInfo, JobStatus, fence_attempt, heartbeat, transition
from service.schemas.internal import (
    CheckpointIn,
    HeartbeatOut,
    InternalSpec,
    MetricsAccepted,
    MetricsIn,
    RestartIn,
    StatusIn,
)
from service.schemas.jobs import CheckpointRead, JobError
from service.webhooks.events import WebhookEvent
from service.webhooks.outbox import enqueue_in
from shunter.jobspec.elastic import stored_at_width
from shunter.jobspec.vocab import EventType

__all__ = [
    "StoredMetrics",
    "add_checkpoint",
    "add_metrics",
    "add_restart",
    "attempt_heartbeat",
    "attempt_spec",
    "check_attempt_token",
    "report_status",
]

S = JobStatus


def check_attempt_token(session: Session, *, token: str | None, job_id: str, attempt: int) -> None:
    """401 unless ``token`` is the token issued for exactly this (job, attempt)."""
    if not token:
        raise Unauthorized("missing attempt token")
    row = session.execute(
        select(Attempt.job_id, Attempt.number).where(Attempt.token_hash == hash_token(token))
    ).first()
    if row is None or row[0] != job_id or row[1] != attempt:
        raise Unauthorized("invalid attempt token for this job and attempt")


def attempt_spec(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    lease_seconds: float,
    avoid_nodes: Callable[[Session], list[str]] = lambda _s: [],
) -> InternalSpec:
    """The spec the driver of ``attempt`` runs; ``avoid_nodes``: the nodes it must not use
    (the cordons, ``service.health.cordons``), read after the fence."""
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    job = session.get(Job, job_id)
    assert job is not None
    width = session.execute(
        select(Attempt.num_workers).where(Attempt.job_id == job_id, Attempt.number == attempt)
    ).scalar_one_or_none()
    return InternalSpec(
        job_id=job.id,
        attempt=attempt,
        # An elastic job's attempt runs the rigid spec at its width (accumulation re-derived:
        # the same global batch at every width; shunter.jobspec.elastic).
        spec=stored_at_width(job.spec, width),
        output_dir=str(job.spec["training"]["output_dir"]),
        resume_from=job.resume_from,
        runtime_used_s=_runtime_used(session, job_id=job_id, before=attempt),
        avoid_nodes=avoid_nodes(session),
        inputs=job.inputs or {},
    )


def _runtime_used(session: Session, *, job_id: str, before: int) -> float:
    """Seconds the job's earlier attempts ran (claim to end): max_runtime_seconds counts run
    time across attempts, and time queued between attempts (after a preemption) is not run."""
    rows = session.execute(
        select(Attempt.started_at, Attempt.ended_at).where(
            Attempt.job_id == job_id, Attempt.number < before, Attempt.ended_at.is_not(None)
        )
    )
    total = 0.0
    for start, end in rows:
        if end is not None:
            total += max(0.0, (as_utc(end) - as_utc(start)).total_seconds())
    return total


def attempt_heartbeat(
    session: Session, *, job_id: str, attempt: int, lease_seconds: float
) -> HeartbeatOut:
    expires, cancel = heartbeat(
        session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds
    )
    stop = stop_request(session, job_id=job_id, attempt=attempt)
    return HeartbeatOut(
        lease_expires_at=expires,
        cancel_requested=cancel,
        checkpoint_now=stop is not None,
        stop_cause=stop.cause if stop else None,
        stop_detail=stop.detail if stop else None,
    )


def _record_run(
    session: Session, *, job_id: str, attempt: int, versions: Mapping[str, Any]
) -> None:
    """The versions the driver of ``attempt`` runs with, as the record's ``run``."""
    job = session.get(Job, job_id)
    assert job is not None
    job.record = {**(job.record or {}), "run": {"attempt": attempt, **versions}}


def report_status(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    body: StatusIn,
    lease_seconds: float,
    max_infra_retries: int = 3,
) -> PhaseMark | None:
    """running: starting -> running (no-op if already running or cancelling).
    succeeded/failed: terminal; if a cancel was requested meanwhile the job ends cancelled.
    failed with a retryable infra error (``loss.RETRYABLE_ERRORS``: ``storage_unavailable``):
    the attempt is lost and the job requeued from its newest verified checkpoint.
    preempted: checkpointed at ``step`` on request; requeued or paused (``preemption``).
    Returns the ``succeeded`` start-up phase when this report wrote it (``jobs.phases``)."""
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    status = JobStatus(session.execute(select(Job.status).where(Job.id == job_id)).scalar_one())
    if body.status == "preempted" and status != S.CANCELLING:
        finish_preempted(session, job_id=job_id, attempt=attempt, step=body.step)
        return None
    if body.status == "running":
        if body.versions is not None:
            _record_run(session, job_id=job_id, attempt=attempt, versions=body.versions)
        if status == S.STARTING:
            transition(session, job_id=job_id, to=S.RUNNING, message=f"attempt {attempt} running")
        return None
    if status == S.CANCELLING:
        msg = f"attempt {attempt} ended ({body.status}) after a cancel request"
        transition(
            session,
            job_id=job_id,
            to=S.CANCELLED,
            message=msg,
            error=ErrorInfo(type="cancelled", message=msg),
        )
        return None
    final_uri = body.final_model_uri
    if final_uri is not None:
        final_uri = confined(
            final_uri, output_dir=_output_dir(session, job_id), field="final_model_uri"
        )
    if body.status == "succeeded":
        transition(
            session,
            job_id=job_id,
            to=S.SUCCEEDED,
            message=f"attempt {attempt} succeeded",
            values={"final_model_uri": final_uri},
        )
        return record_phase(session, job_id=job_id, attempt=attempt, phase="succeeded")
    err = body.error or _unknown_error()
    if err.type in RETRYABLE_ERRORS:
        lose_attempt(
            session,
            job_id=job_id,
            attempt=attempt,
            cause=RETRYABLE_ERRORS[err.type],
            detail=err.message[:500],
            max_infra_retries=max_infra_retries,
        )
        return None
    transition(
        session,
        job_id=job_id,
        to=S.FAILED,
        message=f"attempt {attempt} failed: {err.type}",
        error=ErrorInfo(type=err.type, message=err.message),
        values={"final_model_uri": final_uri},
    )
    return None


def _output_dir(session: Session, job_id: str) -> str:
    spec = session.execute(select(Job.spec).where(Job.id == job_id)).scalar_one()
    return str(spec["training"]["output_dir"])


def _unknown_error() -> JobError:
    return JobError(type="unknown", message="the driver reported failure without an error")


def _insert(session: Session, model: type[Any]) -> Any:
    dialect = session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(model)


def _finite(value: Any) -> Any:
    """JSON-safe: non-finite floats become None (PostgreSQL JSON rejects NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


@dataclass(frozen=True)
class StoredMetrics:
    """What one batch stored: the reply, and the (name, step) points new in this batch (a
    retried batch has none), which the health watches judge (``service.health.watch``)."""

    accepted: MetricsAccepted
    new: frozenset[tuple[str, int]]


def add_metrics(
    session: Session, *, job_id: str, attempt: int, body: MetricsIn, lease_seconds: float
) -> StoredMetrics:
    """Store a batch; a point already stored for (job, attempt, step, name) is ignored, so a
    retried batch is harmless. Updates ``progress`` and ``latest_metrics``."""
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    now = utcnow_py()
    rows = [
        {
            "job_id": job_id,
            "attempt": attempt,
            "step": p.step,
            "name": p.name,
            "value": p.value,
            "time": p.time or now,
        }
        for p in body.points
        if p.finite
    ]
    skipped = len(body.points) - len(rows)
    new: frozenset[tuple[str, int]] = frozenset()
    if rows:
        stmt = (
            _insert(session, MetricPoint)
            .values(rows)
            .on_conflict_do_nothing(index_elements=["job_id", "attempt", "step", "name"])
            .returning(MetricPoint.name, MetricPoint.step)
        )
        # Count what RETURNING gives back: rowcount of a multi-row upsert is not portable.
        new = frozenset((r[0], r[1]) for r in session.execute(stmt).all())
    values: dict[str, Any] = {"updated_at": now}
    if rows:
        job = session.get(Job, job_id)
        assert job is not None
        latest: dict[str, Any] = dict(job.latest_metrics or {})
        for p in sorted((p for p in body.points if p.finite), key=lambda p: p.step):
            if p.step >= int(latest.get("step", -1)):
                latest[p.name] = p.value
                latest["step"] = p.step
        values["latest_metrics"] = latest
    if body.progress is not None:
        values.update(
            progress_step=body.progress.step,
            progress_total_steps=body.progress.total_steps,
            progress_epoch=body.progress.epoch,
        )
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return StoredMetrics(MetricsAccepted(accepted=len(new), skipped_non_finite=skipped), new)


def add_checkpoint(
    session: Session, *, job_id: str, attempt: int, body: CheckpointIn, lease_seconds: float
) -> CheckpointRead:
    """Register a checkpoint (idempotent on (job, attempt, step)); newest becomes latest.
    The URI must resolve inside the job's output directory (422 otherwise)."""
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    uri = confined(body.uri, output_dir=_output_dir(session, job_id), field="uri")
    stmt = (
        _insert(session, Checkpoint)
        .values(
            job_id=job_id,
            attempt=attempt,
            step=body.step,
            uri=uri,
            bytes=body.bytes,
            metrics=_finite(body.metrics),
            verified=body.verified,
            created_at=utcnow_py(),
        )
        .on_conflict_do_nothing(index_elements=["job_id", "attempt", "step"])
    )
    new = session.execute(stmt.returning(Checkpoint.id)).first() is not None
    ckpt = session.execute(
        select(Checkpoint).where(
            Checkpoint.job_id == job_id, Checkpoint.attempt == attempt, Checkpoint.step == body.step
        )
    ).scalar_one()
    read = CheckpointRead.model_validate(ckpt)
    if new:  # no event row for a checkpoint: queue its webhook here, once
        webhook = WebhookEvent(
            type_="job.checkpoint",
            event_key=f"checkpoint-{attempt}-{body.step}",
            created_at=utcnow_py(),
            extra={"checkpoint": {"attempt": attempt, "step": body.step}},
        )
        enqueue_in(session, job_id=job_id, webhook=webhook)
    job = session.get(Job, job_id)
    assert job is not None
    current = job.latest_checkpoint or {}
    if body.step >= int(current.get("step", -1)):
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(latest_checkpoint=read.model_dump(mode="json"), updated_at=utcnow_py())
            .execution_options(synchronize_session=False)
        )
    return read


def _restart_events(session: Session, job_id: str, attempt: int) -> int:
    return int(
        session.execute(
            select(func.count())
            .select_from(Event)
            .where(
                Event.job_id == job_id,
                Event.attempt == attempt,
                Event.type == "worker_restarted",
            )
        ).scalar_one()
    )


def add_restart(
    session: Session, *, job_id: str, attempt: int, body: RestartIn, lease_seconds: float
) -> None:
    """Ray Train restarted the worker group inside this attempt: count it (``jobs.restarts``,
    bounded by ``spec.max_restarts``) and write an event naming the lost worker and the step
    the new group resumed from. Idempotent by ``body.seq``: a report whose number this
    attempt already has an event for (a re-sent or replayed post) writes nothing; the row
    lock ``fence_attempt`` takes orders two concurrent repeats."""
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    if body.seq is not None and _restart_events(session, job_id, attempt) >= body.seq:
        return
    count = session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(restarts=Job.restarts + 1, updated_at=utcnow_py())
        .returning(Job.restarts, Job.spec)
        .execution_options(synchronize_session=False)
    ).one()
    limit = count[1].get("max_restarts")
    lost = "a worker" if body.rank is None else f"worker rank {body.rank}"
    where = f" on node {body.node}" if body.node else ""
    start = f"step {body.resumed_from_step}" if body.resumed_from_step else "scratch"
    session.add(
        Event(
            job_id=job_id,
            type=EventType.WORKER_RESTARTED,
            message=(
                f"restart {count[0]}/{limit} in attempt {attempt}: {lost}{where} lost "
                f"({body.cause[:1000]}); the worker group resumed from {start}"
            ),
            attempt=attempt,
        )
    )
