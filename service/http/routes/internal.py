"""``/v1/internal/jobs/{job_id}/attempts/{attempt}/...``: driver -> API (docs/contracts.md).

Bearer = the attempt token. 401 for a wrong token; 409 (nothing written) when the attempt is
no longer the job's active attempt. Token check and write share one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import APIRouter, BackgroundTasks, Query, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from service.http.deps import AppState, StateDep
from service.jobs import attempts as reports
from service.jobs import logs as job_logs
from service.jobs import phases
from service.jobs.health_files import files_for
from service.jobs.prune import delete_stored, prune_checkpoints
from service.jobs.states import fence_attempt
from service.jobs.straggler import CordonPolicy
from service.schemas import (
    CheckpointIn,
    CheckpointRead,
    ErrorBody,
    HeartbeatIn,
    HeartbeatOut,
    InternalSpec,
    MetricsAccepted,
    MetricsIn,
    PhaseIn,
    RestartIn,
    StatusIn,
    WorkerIn,
)

__all__ = ["router"]

T = TypeVar("T")
router = APIRouter(
    prefix="/v1/internal/jobs/{job_id}/attempts/{attempt}",
    tags=["internal"],
    responses={c: {"model": ErrorBody} for c in (401, 409, 413, 422)},
)


def _as_attempt(
    st: AppState, request: Request, job_id: str, attempt: int, fn: Callable[[Session], T]
) -> T:
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""

    def _tx(session: Session) -> T:
        reports.check_attempt_token(session, token=token, job_id=job_id, attempt=attempt)
        return fn(session)

    return st.db.write(_tx)


@router.get("/spec", response_model=InternalSpec)
def spec(job_id: str, attempt: int, request: Request, st: StateDep) -> InternalSpec:
    lease = st.settings.lease_seconds
    return _as_attempt(
        st,
        request,
        job_id,
        attempt,
        lambda s: reports.attempt_spec(s, job_id=job_id, attempt=attempt, lease_seconds=lease),
    )


@router.post("/heartbeat", response_model=HeartbeatOut)
def heartbeat(
    job_id: str, attempt: int, request: Request, st: StateDep, _body: HeartbeatIn | None = None
) -> HeartbeatOut:
    lease = st.settings.lease_seconds
    return _as_attempt(
        st,
        request,
        job_id,
        attempt,
        lambda s: reports.attempt_heartbeat(s, job_id=job_id, attempt=attempt, lease_seconds=lease),
    )


@router.post("/status", response_model=dict[str, str])
def status(
    job_id: str, attempt: int, body: StatusIn, request: Request, st: StateDep
) -> dict[str, str]:
    lease = st.settings.lease_seconds
    mark = _as_attempt(
        st,
        request,
        job_id,
        attempt,
        lambda s: reports.report_status(
            s,
            job_id=job_id,
            attempt=attempt,
            body=body,
            lease_seconds=lease,
            max_infra_retries=st.settings.max_infra_retries,
        ),
    )
    st.observe_phase(mark)
    return {"status": "ok"}


@router.post("/phases", response_model=dict[str, str])
def phase(
    job_id: str, attempt: int, body: PhaseIn, request: Request, st: StateDep
) -> dict[str, str]:
    """Rank 0 reached a start-up phase: a ``phase`` event (once per phase) and the histogram."""
    lease = st.settings.lease_seconds
    mark = _as_attempt(
        st,
        request,
        job_id,
        attempt,
        lambda s: phases.add_worker_phase(
            s, job_id=job_id, attempt=attempt, phase=body.phase, at=body.time, lease_seconds=lease
        ),
    )
    st.observe_phase(mark)
    return {"status": "ok"}


@router.post("/metrics", response_model=MetricsAccepted)
def metrics(
    job_id: str, attempt: int, body: MetricsIn, request: Request, st: StateDep
) -> MetricsAccepted:
    lease = st.settings.lease_seconds
    return _as_attempt(
        st,
        request,
        job_id,
        attempt,
        lambda s: reports.add_metrics(
            s,
            job_id=job_id,
            attempt=attempt,
            body=body,
            lease_seconds=lease,
            nodes=lambda: files_for(st.settings).workers(job_id=job_id, attempt=attempt),
            cordon=CordonPolicy.from_settings(st.settings),
        ),
    )


@router.post("/checkpoints", response_model=CheckpointRead)
def checkpoints(
    job_id: str,
    attempt: int,
    body: CheckpointIn,
    request: Request,
    st: StateDep,
    background: BackgroundTasks,
) -> CheckpointRead:
    """Register a checkpoint; ``save_total_limit`` then prunes the older ones (rows in this
    transaction, stored objects after the reply)."""
    lease = st.settings.lease_seconds

    def _add(s: Session) -> tuple[CheckpointRead, list[str]]:
        read = reports.add_checkpoint(
            s, job_id=job_id, attempt=attempt, body=body, lease_seconds=lease
        )
        return read, prune_checkpoints(s, job_id=job_id)

    read, pruned = _as_attempt(st, request, job_id, attempt, _add)
    if pruned:
        background.add_task(delete_stored, pruned)
    return read


@router.post("/restarts", response_model=dict[str, str])
def restarts(
    job_id: str, attempt: int, body: RestartIn, request: Request, st: StateDep
) -> dict[str, str]:
    """Ray Train restarted this attempt's worker group (a worker died): an event + the count."""
    lease = st.settings.lease_seconds
    _as_attempt(
        st,
        request,
        job_id,
        attempt,
        lambda s: reports.add_restart(
            s, job_id=job_id, attempt=attempt, body=body, lease_seconds=lease
        ),
    )
    return {"status": "ok"}


@router.post("/workers", response_model=dict[str, str])
def workers(
    job_id: str, attempt: int, body: WorkerIn, request: Request, st: StateDep
) -> dict[str, str]:
    """A worker of this attempt started: its rank, pid and node, for the hang watch's stack
    dumps (``service.jobs.hang``). Stored beside the job's logs, one file per rank."""
    lease = st.settings.lease_seconds
    _as_attempt(
        st,
        request,
        job_id,
        attempt,
        lambda s: fence_attempt(s, job_id=job_id, attempt=attempt, lease_seconds=lease),
    )
    files_for(st.settings).put_worker(job_id=job_id, attempt=attempt, worker=body)
    return {"status": "ok"}


@router.post("/logs", response_model=dict[str, int])
async def logs(
    job_id: str,
    attempt: int,
    request: Request,
    st: StateDep,
    offset: Annotated[int, Query(ge=0, description="byte offset of the body in the output")],
) -> dict[str, int]:
    """Append a batch of the attempt's output (raw bytes); returns ``next_offset``, the
    stream's length now. Idempotent by offset. Accepted while the attempt is active and for
    ``log_grace_seconds`` after it ended (its last lines)."""
    data = await request.body()  # the body limit middleware caps it
    lease, grace = st.settings.lease_seconds, st.settings.log_grace_seconds

    def _write() -> int:
        _as_attempt(
            st,
            request,
            job_id,
            attempt,
            lambda s: job_logs.admit_batch(
                s, job_id=job_id, attempt=attempt, lease_seconds=lease, grace_s=grace
            ),
        )
        store = job_logs.store_for(st.settings)
        return store.append(job_id=job_id, attempt=attempt, offset=offset, data=data)

    return {"next_offset": await run_in_threadpool(_write)}
