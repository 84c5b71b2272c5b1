"""``/v1/internal/jobs/{job_id}/attempts/{attempt}/...``: driver -> API (docs/contracts.md).

Bearer = the attempt token. 401 for a wrong token; 409 (nothing written) when the attempt is
no longer the job's active attempt. Token check and write share one transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypedDict, TypeVar

from fastapi import APIRouter, BackgroundTasks, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from service.db.tables import utcnow_py
from service.health.rank_files import files_for
from service.health.straggler import CordonPolicy, cordoned_nodes
from service.health.watch import after_metrics
from service.http.deps import AppState, StateDep
from service.jobs import attempts as reports
from service.jobs import logs as job_logs
from service.jobs import phases
from service.jobs.phases import PhaseMark
from service.jobs.prune import delete_stored, prune_checkpoints
from service.jobs.states import fence_attempt
from service.schemas.base import ErrorBody
from service.schemas.internal import (
    CheckpointIn,
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
from service.schemas.jobs import CheckpointRead

__all__ = ["router"]

T = TypeVar("T")
router = APIRouter(
    prefix="/v1/internal/jobs/{job_id}/attempts/{attempt}",
    tags=["internal"],
    responses={c: {"model": ErrorBody} for c in (401, 409, 413, 422)},
)


class _Ids(TypedDict):
    job_id: str
    attempt: int


@dataclass(frozen=True)
class _AttemptCall:
    """One call of the attempt's driver: its ids, bearer token and the service's state."""

    st: AppState
    token: str
    ids: _Ids

    @property
    def lease(self) -> float:
        return self.st.settings.lease_seconds

    def run(self, fn: Callable[[Session], T]) -> T:
        """``fn`` in one transaction with the token check (401, or 409 for a stale attempt)."""

        def _tx(session: Session) -> T:
            reports.check_attempt_token(session, token=self.token, **self.ids)
            return fn(session)

        return self.st.db.write(_tx)

    def observed(self, write: Callable[[Session], PhaseMark | None]) -> dict[str, str]:
        """A report that may mark a start-up phase: written as the attempt, then observed."""
        self.st.observe_phase(self.run(write))
        return {"status": "ok"}


def _attempt_call(job_id: str, attempt: int, request: Request, st: StateDep) -> _AttemptCall:
    scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    return _AttemptCall(st=st, token=token, ids=_Ids(job_id=job_id, attempt=attempt))


CallDep = Annotated[_AttemptCall, Depends(_attempt_call)]


@router.get("/spec", response_model=InternalSpec)
def spec(call: CallDep) -> InternalSpec:
    return call.run(
        lambda s: reports.attempt_spec(
            s,
            **call.ids,
            lease_seconds=call.lease,
            avoid_nodes=lambda s: sorted(cordoned_nodes(s, now=utcnow_py())),
        )
    )


@router.post("/heartbeat", response_model=HeartbeatOut)
def heartbeat(call: CallDep, _body: HeartbeatIn | None = None) -> HeartbeatOut:
    return call.run(lambda s: reports.attempt_heartbeat(s, **call.ids, lease_seconds=call.lease))


@router.post("/status", response_model=dict[str, str])
def status(call: CallDep, body: StatusIn) -> dict[str, str]:
    retries = call.st.settings.max_infra_retries
    return call.observed(
        lambda s: reports.report_status(
            s, **call.ids, body=body, lease_seconds=call.lease, max_infra_retries=retries
        )
    )


@router.post("/phases", response_model=dict[str, str])
def phase(call: CallDep, body: PhaseIn) -> dict[str, str]:
    """Rank 0 reached a start-up phase: a ``phase`` event (once per phase) and the histogram."""
    return call.observed(
        lambda s: phases.add_worker_phase(
            s, **call.ids, phase=body.phase, at=body.time, lease_seconds=call.lease
        )
    )


@router.post("/metrics", response_model=MetricsAccepted)
def metrics(call: CallDep, body: MetricsIn) -> MetricsAccepted:
    return call.run(lambda s: _add_metrics(s, call, body))


def _add_metrics(s: Session, call: _AttemptCall, body: MetricsIn) -> MetricsAccepted:
    settings, ids = call.st.settings, call.ids
    stored = reports.add_metrics(s, **ids, body=body, lease_seconds=call.lease)
    after_metrics(
        s,
        **ids,
        body=body,
        new=stored.new,
        nodes=lambda: files_for(settings).workers(**ids),
        cordon=CordonPolicy.from_settings(settings),
    )
    return stored.accepted


@router.post("/checkpoints", response_model=CheckpointRead)
def checkpoints(call: CallDep, body: CheckpointIn, background: BackgroundTasks) -> CheckpointRead:
    """Register a checkpoint; ``save_total_limit`` then prunes the older ones (rows in this
    transaction, stored objects after the reply)."""

    def _add(s: Session) -> tuple[CheckpointRead, list[str]]:
        read = reports.add_checkpoint(s, **call.ids, body=body, lease_seconds=call.lease)
        return read, prune_checkpoints(s, job_id=call.ids["job_id"])

    read, pruned = call.run(_add)
    if pruned:
        background.add_task(delete_stored, pruned)
    return read


@router.post("/restarts", response_model=dict[str, str])
def restarts(call: CallDep, body: RestartIn) -> dict[str, str]:
    """Ray Train restarted this attempt's worker group (a worker died): an event + the count."""
    call.run(lambda s: reports.add_restart(s, **call.ids, body=body, lease_seconds=call.lease))
    return {"status": "ok"}


@router.post("/workers", response_model=dict[str, str])
def workers(call: CallDep, body: WorkerIn) -> dict[str, str]:
    """A worker of this attempt started: its rank, pid and node, for the hang watch's stack
    dumps (``service.health.hang``). Stored beside the job's logs, one file per rank."""
    call.run(lambda s: fence_attempt(s, **call.ids, lease_seconds=call.lease))
    files_for(call.st.settings).put_worker(**call.ids, worker=body)
    return {"status": "ok"}


@router.post("/logs", response_model=dict[str, int])
async def logs(
    call: CallDep,
    request: Request,
    offset: Annotated[int, Query(ge=0, description="byte offset of the body in the output")],
) -> dict[str, int]:
    """Append a batch of the attempt's output (raw bytes); returns ``next_offset``, the
    stream's length now. Idempotent by offset. Accepted while the attempt is active and for
    ``log_grace_seconds`` after it ended (its last lines)."""
    data = await request.body()  # the body limit middleware caps it
    grace = call.st.settings.log_grace_seconds

    def _write() -> int:
        call.run(
            lambda s: job_logs.admit_batch(s, **call.ids, lease_seconds=call.lease, grace_s=grace)
        )
        store = job_logs.store_for(call.st.settings)
        return store.append(**call.ids, offset=offset, data=data)

    return {"next_offset": await run_in_threadpool(_write)}
