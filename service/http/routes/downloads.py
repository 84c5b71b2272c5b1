"""``GET /v1/jobs/{id}/checkpoints/{ckpt}/download``: the final, best or a checkpoint's model."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from service.http.deps import CurrentUser, StateDep
from service.jobs.checkpoint_models import export_config
from service.jobs.download import resolve_download, tar_size, tar_stream
from service.schemas.base import ErrorBody

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get(
    "/jobs/{job_id}/checkpoints/{ckpt}/download",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-tar": {}}, "description": "HF-layout model folder"},
        **{c: {"model": ErrorBody} for c in (401, 404, 409, 500)},
    },
)
def download(job_id: str, ckpt: str, st: StateDep, user: CurrentUser) -> StreamingResponse:
    """``ckpt``: ``final``, ``best`` (a job run with ``load_best_model_at_end``), or a
    checkpoint by the id the list gives (``step-N@A``) or by its step (``N``, ``step-N``:
    the newest verified one): that checkpoint as a model, consolidated on the first request
    (a sync route: FastAPI runs it in its threadpool, so the wait blocks no event loop)."""
    export = export_config(
        home=st.settings.home,
        python=st.settings.export_python,
        timeout_s=st.settings.export_timeout_seconds,
        hf_home=st.settings.hf_home,
    )
    path = resolve_download(st.db, principal=user, job_id=job_id, which=ckpt, export=export)
    name = f"{job_id}-{ckpt}"
    # The exact length up front: a stream the store breaks mid-way ends short of it, so a
    # client never takes a cut tar for a whole one (service.jobs.download).
    return StreamingResponse(
        tar_stream(path, name),
        media_type="application/x-tar",
        headers={
            "Content-Disposition": f'attachment; filename="{name}.tar"',
            "Content-Length": str(tar_size(path, name)),
        },
    )
