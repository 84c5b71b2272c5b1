"""``GET /v1/jobs/{id}/checkpoints/{ckpt}/download``: the final or best model as a tar."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from service.http.deps import CurrentUser, StateDep
from service.jobs.download import model_dir, tar_stream
from service.schemas import ErrorBody

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get(
    "/jobs/{job_id}/checkpoints/{ckpt}/download",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-tar": {}}, "description": "HF-layout model folder"},
        **{c: {"model": ErrorBody} for c in (401, 404, 409)},
    },
)
def download(job_id: str, ckpt: str, st: StateDep, user: CurrentUser) -> StreamingResponse:
    """``ckpt``: ``final``, or ``best`` (a job run with ``load_best_model_at_end``)."""
    path = st.db.read(lambda s: model_dir(s, principal=user, job_id=job_id, which=ckpt))
    name = f"{job_id}-{ckpt}"
    return StreamingResponse(
        tar_stream(path, name),
        media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{name}.tar"'},
    )
