"""``/v1/jobs`` routes, ``/v1/queue`` and ``/v1/cluster``. Thin: parse, call the domain, return."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from service import jobs
from service.api.deps import CurrentUser, Limit, StateDep
from service.schemas import (
    CheckpointsPage,
    ClusterRead,
    ErrorBody,
    EventsPage,
    JobRead,
    JobsPage,
    LogsRead,
    MetricsPage,
    NodeRead,
    QueuePage,
)
from service.submit import submit_job

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"])
_ERRORS: dict[int | str, dict[str, object]] = {
    c: {"model": ErrorBody} for c in (400, 401, 403, 404, 409, 413, 422)
}


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobRead,
    responses=_ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "application/yaml": {"schema": {"type": "string"}},
            },
        }
    },
)
async def submit(
    request: Request,
    response: Response,
    st: StateDep,
    user: CurrentUser,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> JobRead:
    """Submit a JobSpec (JSON, or YAML as ``application/yaml``). 201 new, 200 replay."""
    raw = bytearray()
    async for chunk in request.stream():  # the body limit middleware caps the total
        raw += chunk
    launcher = st.need_launcher()
    cluster = await run_in_threadpool(launcher.cluster)
    result = await run_in_threadpool(
        lambda: submit_job(
            st.db,
            principal=user,
            raw=bytes(raw),
            content_type=request.headers.get("content-type"),
            idempotency_key=idempotency_key,
            data_roots=st.settings.data_roots,
            storage=st.settings.storage,
            cluster=cluster,
        )
    )
    response.status_code = 201 if result.created else 200
    return result.job


@router.get("/jobs", response_model=JobsPage, responses=_ERRORS)
def list_jobs(
    st: StateDep,
    user: CurrentUser,
    limit: Limit,
    cursor: str | None = None,
    status: Annotated[list[str] | None, Query()] = None,
    name: str | None = None,
    team: str | None = None,
) -> JobsPage:
    statuses = [s for v in status or [] for s in v.split(",") if s]
    return st.db.read(
        lambda s: jobs.list_jobs(
            s, principal=user, limit=limit, cursor=cursor, status=statuses, name=name, team=team
        )
    )


@router.get("/jobs/{job_id}", response_model=JobRead, responses=_ERRORS)
async def get_job(job_id: str, st: StateDep, user: CurrentUser) -> Response:
    """The API's hottest call (clients poll it). On SQLite the read runs on the event loop:
    a WAL read never waits for writers and is cheaper than a threadpool hop."""

    def read() -> JobRead:
        return st.db.read_core(lambda c: jobs.get_job(c, principal=user, job_id=job_id))

    job = read() if st.db.is_sqlite else await run_in_threadpool(read)
    return Response(job.model_dump_json(), media_type="application/json")


@router.post("/jobs/{job_id}/cancel", response_model=JobRead, responses=_ERRORS)
def cancel_job(job_id: str, st: StateDep, user: CurrentUser) -> JobRead:
    return jobs.cancel_job(st.db, principal=user, job_id=job_id, launcher=st.need_launcher())


@router.post("/jobs/{job_id}/resume", response_model=JobRead, responses=_ERRORS)
def resume_job(job_id: str, st: StateDep, user: CurrentUser) -> JobRead:
    return jobs.resume_job(st.db, principal=user, job_id=job_id)


@router.get("/jobs/{job_id}/events", response_model=EventsPage, responses=_ERRORS)
def list_events(
    job_id: str, st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None
) -> EventsPage:
    return st.db.read(
        lambda s: jobs.list_events(s, principal=user, job_id=job_id, limit=limit, cursor=cursor)
    )


@router.get("/jobs/{job_id}/metrics", response_model=MetricsPage, responses=_ERRORS)
def list_metrics(
    job_id: str,
    st: StateDep,
    user: CurrentUser,
    limit: Limit,
    cursor: str | None = None,
    after: Annotated[int | None, Query(ge=0, description="a point id; newer points only")] = None,
    name: Annotated[list[str] | None, Query()] = None,
) -> MetricsPage:
    names = [n for v in name or [] for n in v.split(",") if n]
    return st.db.read(
        lambda s: jobs.list_metrics(
            s, principal=user, job_id=job_id, limit=limit, cursor=cursor, after=after, names=names
        )
    )


@router.get("/jobs/{job_id}/checkpoints", response_model=CheckpointsPage, responses=_ERRORS)
def list_checkpoints(
    job_id: str, st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None
) -> CheckpointsPage:
    return st.db.read(
        lambda s: jobs.list_checkpoints(
            s, principal=user, job_id=job_id, limit=limit, cursor=cursor
        )
    )


@router.get("/jobs/{job_id}/logs", response_model=LogsRead, responses=_ERRORS)
def job_logs(
    job_id: str,
    st: StateDep,
    user: CurrentUser,
    tail: Annotated[int | None, Query(ge=0)] = None,
) -> LogsRead:
    sub = st.db.read(lambda s: jobs.last_submission_id(s, principal=user, job_id=job_id))
    if sub is None:
        return LogsRead(text="", submission_id=None)
    tail = min(tail, st.settings.logs_tail_max) if tail is not None else None
    return LogsRead(text=st.need_launcher().logs(sub, tail), submission_id=sub)


@router.get("/queue", response_model=QueuePage, responses=_ERRORS)
def queue(st: StateDep, user: CurrentUser) -> QueuePage:
    cluster = st.need_launcher().cluster()
    return st.db.read(lambda s: jobs.queue_view(s, principal=user, cluster=cluster))


@router.get("/cluster", response_model=ClusterRead, responses=_ERRORS)
def cluster(st: StateDep, _user: CurrentUser) -> ClusterRead:
    c = st.need_launcher().cluster()
    return ClusterRead(
        nodes=[NodeRead.model_validate(n, from_attributes=True) for n in c.nodes],
        total_cpus=c.total_cpus,
        free_cpus=c.free_cpus,
        total_gpus=c.total_gpus,
        free_gpus=c.free_gpus,
    )
