"""``DELETE /v1/jobs/{id}`` (a finished job, with its storage) and ``POST /v1/admin/gc``."""

from __future__ import annotations

from fastapi import APIRouter, Response

from service.errors import Unprocessable
from service.housekeeping.gc import run_gc
from service.housekeeping.retention import parse_age
from service.http.deps import CurrentUser, StateDep
from service.jobs.delete import delete_job
from service.schemas.base import ErrorBody
from service.schemas.internal import GcIn, GcRead

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["housekeeping"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 404, 409, 422)},
)


@router.delete("/jobs/{job_id}", status_code=204)
def delete(job_id: str, st: StateDep, user: CurrentUser) -> Response:
    """Delete a finished job: its metrics, events, checkpoints, logs and storage (audited)."""
    delete_job(st.db, principal=user, job_id=job_id, storage=st.settings.storage)
    return Response(status_code=204)


@router.post("/admin/gc", response_model=GcRead)
def gc(body: GcIn, st: StateDep, user: CurrentUser) -> GcRead:
    """Admin: delete every finished job older than ``older_than`` (or list them: dry_run)."""
    try:
        age = parse_age(body.older_than)
    except ValueError as exc:
        raise Unprocessable(f"older_than: {exc}", detail="bad_age") from None
    result = run_gc(
        st.db, principal=user, storage=st.settings.storage, older_than=age, dry_run=body.dry_run
    )
    return GcRead(job_ids=result.job_ids, deleted=result.deleted, dry_run=result.dry_run)
