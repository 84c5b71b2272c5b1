"""Internal API domain: what a job's driver reports (spec fetch, heartbeat, status, metric
batches, checkpoints), authenticated by the per-attempt token and FENCED: every write first
proves, in its own transaction, that the attempt is still the job's active attempt
(``states.fence_attempt``); otherwise ``StaleAttempt`` (409) and nothing is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.accounts.auth import hash_token
from service.db.models import Attempt, Checkpoint, Event, Job, MetricPoint, utcnow_py
from service.db.sqltime import as_utc
from service.errors import Unauthorized
from service.jobs.confine import confined
from service.jobs.loss import RETRYABLE_ERRORS, lose_attempt
from service.jobs.phases import PhaseMark, record_phase
from service.jobs.preemption import finish_preempted, stop_request
from service.jobs.states import ErrorInfo, JobStatus, fence_attempt, heartbeat, transition
from service.jobs.straggler import (
    CordonPolicy,
    cordoned_nodes,
    is_window_point,
    judge_window,
    window_points,
)
from service.jobs.straggler_rule import complete
from service.launch import StackTarget
from service.schemas import (
    CheckpointIn,
    CheckpointRead,
    HeartbeatOut,
    InternalSpec,
    JobError,
    MetricsAccepted,
    MetricsIn,
    RestartIn,
    StatusIn,
)
from service.webhooks.outbox import enqueue_in
from shunter.jobspec.models import StragglerSpec

__all__ = [
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
    session: Session, *, job_id: str, attempt: int, lease_seconds: float
) -> InternalSpec:
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
    job = session.get(Job, job_id)
    assert job is not None
    return InternalSpec(
        job_id=job.id,
        attempt=attempt,
        spec=job.spec,
        output_dir=str(job.spec["training"]["output_dir"]),
        resume_from=job.resume_from,
        runtime_used_s=_runtime_used(session, job_id=job_id, before=attempt),
        avoid_nodes=sorted(cordoned_nodes(session, now=utcnow_py())),
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
            transition(
                session,
                job_id=job_id,
                to=S.RUNNING,
                event_type="running",
                message=f"attempt {attempt} running",
            )
        return None
    if status == S.CANCELLING:
        msg = f"attempt {attempt} ended ({body.status}) after a cancel request"
        transition(
            session,
            job_id=job_id,
            to=S.CANCELLED,
            event_type="cancelled",
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
            event_type="succeeded",
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
        event_type="failed",
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


def add_metrics(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    body: MetricsIn,
    lease_seconds: float,
    nodes: Callable[[], list[StackTarget]] = list,
    cordon: CordonPolicy | None = None,
) -> MetricsAccepted:
    """Store a batch; a point already stored for (job, attempt, step, name) is ignored, so a
    retried batch is harmless. Updates ``progress`` and ``latest_metrics``. A window of
    per-rank step times stored for the first time is judged (``service.jobs.straggler``;
    ``nodes``: where each rank runs, read only when a rank straggles)."""
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
    accepted = 0
    if rows:
        stmt = (
            _insert(session, MetricPoint)
            .values(rows)
            .on_conflict_do_nothing(index_elements=["job_id", "attempt", "step", "name"])
            .returning(MetricPoint.name, MetricPoint.step)
        )
        # Count what RETURNING gives back: rowcount of a multi-row upsert is not portable.
        inserted = session.execute(stmt).all()
        accepted = len(inserted)
        _health_events(session, job_id, attempt, body, {(r[0], r[1]) for r in inserted})
    values: dict[str, Any] = {"updated_at": now}
    job = session.get(Job, job_id)
    assert job is not None
    windows = sorted({r[1] for r in inserted if is_window_point(r[0])}) if rows else []
    if windows:  # new windows only: a retried batch judges nothing twice
        health = (job.spec or {}).get("health") or {}
        spec = StragglerSpec.model_validate(health.get("straggler") or {})
        for step in windows:
            points = window_points(session, job_id=job_id, attempt=attempt, step=step)
            if not complete(points):
                continue  # the rest of the window comes in a later batch, which judges it
            judge_window(
                session,
                job_id=job_id,
                attempt=attempt,
                step=step,
                points=points,
                spec=spec,
                nodes=nodes,
                cordon=cordon or CordonPolicy(),
                now=now,
            )
    if rows:
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
    return MetricsAccepted(accepted=accepted, skipped_non_finite=skipped)


# The divergence guard's metrics (trainer_core.health) -> one event each, written only when the
# point is new, so a retried batch writes no second event.
HEALTH_EVENTS = {"health_skipped_steps": "step_skipped", "health_rollbacks": "rolled_back"}


def _health_events(
    session: Session, job_id: str, attempt: int, body: MetricsIn, new: set[tuple[str, int]]
) -> None:
    by_step: dict[int, dict[str, float]] = {}
    for p in body.points:
        by_step.setdefault(p.step, {})[p.name] = p.value
    for name, step in sorted(new, key=lambda n: n[1]):
        if name not in HEALTH_EVENTS:
            continue
        at = by_step.get(step, {})
        if name == "health_skipped_steps":
            message = (
                f"step {step} skipped (optimizer step not taken): loss "
                f"{_num(at.get('health_skipped_loss'))}, grad norm "
                f"{_num(at.get('health_skipped_grad_norm'))}; {int(at[name])} skipped so far"
            )
        else:
            message = (
                f"rollback {int(at[name])} at step {step}: back to the checkpoint of step "
                f"{_num(at.get('health_rollback_to_step'))}, the data since skipped, seed now "
                f"{_num(at.get('health_seed'))}"
            )
        session.add(
            Event(job_id=job_id, type=HEALTH_EVENTS[name], message=message, attempt=attempt)
        )


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.6g}" if math.isfinite(value) else str(value)


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
        enqueue_in(
            session,
            job_id=job_id,
            event_key=f"checkpoint-{attempt}-{body.step}",
            type_="job.checkpoint",
            created_at=utcnow_py(),
            extra={"checkpoint": {"attempt": attempt, "step": body.step}},
        )
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


def add_restart(
    session: Session, *, job_id: str, attempt: int, body: RestartIn, lease_seconds: float
) -> None:
    """Ray Train restarted the worker group inside this attempt: count it (``jobs.restarts``,
    bounded by ``spec.max_restarts``) and write an event naming the lost worker and the step
    the new group resumed from."""
    fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
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
            type="worker_restarted",
            message=(
                f"restart {count[0]}/{limit} in attempt {attempt}: {lost}{where} lost "
                f"({body.cause[:1000]}); the worker group resumed from {start}"
            ),
            attempt=attempt,
        )
    )
