"""``/v1/sweeps``: hyperparameter sweeps whose trials are jobs. Thin: parse, call, return."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from service.http.deps import CurrentUser, Limit, StateDep, SubmitCtx
from service.schemas.base import ErrorBody
from service.schemas.sweeps import SweepRead, SweepsPage
from service.sweeps import queries as sweeps
from service.sweeps.submit import create_sweep

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["sweeps"],
    responses={c: {"model": ErrorBody} for c in (400, 401, 403, 404, 409, 413, 422)},
)


@router.post(
    "/sweeps",
    status_code=201,
    response_model=SweepRead,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
)
async def submit_sweep(
    request: Request, st: StateDep, user: CurrentUser, checks: SubmitCtx
) -> SweepRead:
    """A sweep: ``base`` (a JobSpec), ``space``, ``objective`` + ``direction``, ``max_trials``,
    ``max_parallel``, ``sampler``, ``pruner`` (+ settings), ``budget``. Every corner of the
    space is validated as a trial spec first (422 naming ``space.<path>``)."""
    raw = await request.body()
    content_type = request.headers.get("content-type")

    def _create() -> SweepRead:
        sweep = create_sweep(
            st.db, principal=user, raw=raw, content_type=content_type, checks=checks
        )
        return st.db.read(lambda s: sweeps.get_sweep(s, principal=user, sweep_id=sweep.id))

    return await run_in_threadpool(_create)


@router.get("/sweeps", response_model=SweepsPage)
def list_sweeps(
    st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None
) -> SweepsPage:
    return st.db.read(lambda s: sweeps.list_sweeps(s, principal=user, limit=limit, cursor=cursor))


@router.get("/sweeps/{sweep_id}", response_model=SweepRead)
def get_sweep(sweep_id: str, st: StateDep, user: CurrentUser) -> SweepRead:
    """The sweep, its trials (parameters, state, objective, best step) and the best trial."""
    return st.db.read(lambda s: sweeps.get_sweep(s, principal=user, sweep_id=sweep_id))


@router.post("/sweeps/{sweep_id}/cancel", response_model=SweepRead)
def cancel_sweep(sweep_id: str, st: StateDep, user: CurrentUser) -> SweepRead:
    """Stop sampling and cancel every unfinished trial."""
    return sweeps.cancel_sweep(
        st.db, principal=user, sweep_id=sweep_id, launcher=st.need_launcher()
    )
