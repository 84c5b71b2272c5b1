"""``/v1/jobs`` routes, ``/v1/queue`` and ``/v1/cluster``. Thin: parse, call the domain, return."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, StreamingResponse

from service.errors import Unavailable
from service.health.rank_files import files_for
from service.health.rank_files import job_stacks as job_stacks_domain
from service.http import log_stream
from service.http.deps import AppState, CurrentUser, Limit, StateDep, SubmitCtx
from service.jobs import checkpoint_now as preemption
from service.jobs import logs as job_logs_domain
from service.jobs import queries as jobs
from service.jobs import reproduce
from service.jobs.queue_page import queue_page
from service.jobs.submit import SubmitResult, submit_job
from service.jobs.submit import dry_run as dry_run_job
from service.launch import ClusterResources
from service.policy.accelerators import KNOWN_MEMORY_GB, AcceleratorType, admin_catalog
from service.schemas.base import ErrorBody
from service.schemas.cluster import ClusterRead, QueuePage, TypeCapacity
from service.schemas.jobs import (
    AttemptsPage,
    CheckpointsPage,
    CloneIn,
    DryRunRead,
    EventsPage,
    JobRead,
    JobRecordRead,
    JobsPage,
    LogsRead,
    MetricsPage,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"])
_ERRORS: dict[int | str, dict[str, object]] = {
    c: {"model": ErrorBody} for c in (400, 401, 403, 404, 409, 413, 422)
}


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobRead | DryRunRead,
    responses={**_ERRORS, 200: {"model": DryRunRead, "description": "dry run, or a replay"}},
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
    ctx: SubmitCtx,
    idempotency_key: Annotated[str | None, Header()] = None,
    dry_run: Annotated[
        bool, Query(description="validate and plan only: 200 {spec, plan}, nothing queued")
    ] = False,
) -> JobRead | DryRunRead:
    """Submit a JobSpec (JSON, or YAML as ``application/yaml``). 201 new, 200 replay.

    ``?dry_run=true`` runs the same checks (same 4xx) and returns the resolved spec and its
    plan (``shunter.jobspec.plan``) with 200; ``Idempotency-Key`` is then ignored.
    """
    raw = bytearray()
    async for chunk in request.stream():  # the body limit middleware caps the total
        raw += chunk
    content_type = request.headers.get("content-type")
    if dry_run:
        response.status_code = 200
        return await run_in_threadpool(
            lambda: dry_run_job(
                st.db, principal=user, raw=bytes(raw), content_type=content_type, ctx=ctx
            )
        )
    result = await run_in_threadpool(
        lambda: submit_job(
            st.db,
            principal=user,
            raw=bytes(raw),
            content_type=content_type,
            idempotency_key=idempotency_key,
            ctx=ctx,
        )
    )
    return _answer(st, response, result)


def _answer(st: AppState, response: Response, result: SubmitResult) -> JobRead:
    """A submit's (or clone's) answer: 201 and a scheduler wake-up for a new job, 200 for a
    replay."""
    if result.created:
        st.wake_scheduler()
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
    include: Annotated[list[str] | None, Query(description="'spec' adds each job's spec")] = None,
) -> JobsPage:
    """Job summaries (no spec unless ``?include=spec``, then at most
    ``SHUNTER_SPEC_PAGE_LIMIT_MAX`` per page)."""
    statuses = [s for v in status or [] for s in v.split(",") if s]
    with_spec = "spec" in {w for v in include or [] for w in v.split(",")}
    if with_spec:
        limit = min(limit, st.settings.spec_page_limit_max)
    return st.db.read(
        lambda s: jobs.list_jobs(
            s,
            principal=user,
            limit=limit,
            cursor=cursor,
            status=statuses,
            name=name,
            team=team,
            include_spec=with_spec,
        )
    )


@router.get("/jobs/{job_id}", response_model=JobRead, responses=_ERRORS)
def get_job(job_id: str, st: StateDep, user: CurrentUser) -> Response:
    """The API's hottest call (clients poll it): one primary-key read, in the threadpool like
    every database call. Serialised once (no second validation against ``response_model``)."""
    job = st.db.read_core(lambda c: jobs.get_job(c, principal=user, job_id=job_id))
    return Response(job.model_dump_json(), media_type="application/json")


@router.get("/jobs/{job_id}/spec", response_model=dict[str, Any], responses=_ERRORS)
def get_job_spec(job_id: str, st: StateDep, user: CurrentUser) -> dict[str, Any]:
    """What the user submitted, every default written out: it resubmits as is
    (``POST /v1/jobs``). The running spec (service paths, ``output_dir``) is the job's
    ``spec``."""
    return st.db.read(lambda s: reproduce.job_spec(s, principal=user, job_id=job_id))


@router.get("/jobs/{job_id}/record", response_model=JobRecordRead, responses=_ERRORS)
def get_job_record(job_id: str, st: StateDep, user: CurrentUser) -> JobRecordRead:
    """What the job ran with: code and package versions, data and model fingerprints, seed."""
    return st.db.read(lambda s: reproduce.job_record(s, principal=user, job_id=job_id))


@router.post("/jobs/{job_id}/clone", status_code=201, response_model=JobRead, responses=_ERRORS)
def clone_job(
    job_id: str,
    body: CloneIn,
    response: Response,
    st: StateDep,
    user: CurrentUser,
    ctx: SubmitCtx,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> JobRead:
    """A new job from this one's submitted spec with ``overrides`` (dotted fields) and,
    optionally, from one of its checkpoints; checked like any submit (422 names the field)."""
    document = st.db.read(
        lambda s: reproduce.clone_spec(
            s,
            principal=user,
            job_id=job_id,
            overrides=body.overrides,
            from_checkpoint=body.from_checkpoint,
        )
    )
    result = submit_job(
        st.db,
        principal=user,
        raw=json.dumps(document).encode(),
        content_type="application/json",
        idempotency_key=idempotency_key,
        ctx=ctx,
    )
    return _answer(st, response, result)


@router.post("/jobs/{job_id}/cancel", response_model=JobRead, responses=_ERRORS)
def cancel_job(job_id: str, st: StateDep, user: CurrentUser) -> JobRead:
    return jobs.cancel_job(st.db, principal=user, job_id=job_id, launcher=st.need_launcher())


@router.post("/jobs/{job_id}/resume", response_model=JobRead, responses=_ERRORS)
def resume_job(job_id: str, st: StateDep, user: CurrentUser) -> JobRead:
    """failed, cancelled or paused -> queued, from the newest verified checkpoint."""
    job = jobs.resume_job(st.db, principal=user, job_id=job_id)
    st.wake_scheduler()
    return job


@router.post("/jobs/{job_id}/pause", response_model=JobRead, responses=_ERRORS)
def pause_job(job_id: str, st: StateDep, user: CurrentUser) -> JobRead:
    """Checkpoint at the next step boundary and free the resources; ``paused`` until resumed."""
    return preemption.pause_job(st.db, principal=user, job_id=job_id)


@router.get("/jobs/{job_id}/events", response_model=EventsPage, responses=_ERRORS)
def list_events(
    job_id: str, st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None
) -> EventsPage:
    return st.db.read(
        lambda s: jobs.list_events(s, principal=user, job_id=job_id, limit=limit, cursor=cursor)
    )


@router.get("/jobs/{job_id}/attempts", response_model=AttemptsPage, responses=_ERRORS)
def list_attempts(job_id: str, st: StateDep, user: CurrentUser) -> AttemptsPage:
    """The job's attempts, oldest first: status, width (an elastic job's differ), type."""
    return st.db.read(lambda s: jobs.list_attempts(s, principal=user, job_id=job_id))


@router.get(
    "/jobs/{job_id}/stacks",
    response_class=PlainTextResponse,
    responses={**_ERRORS, 200: {"content": {"text/plain": {}}}},
)
def job_stacks(
    job_id: str,
    st: StateDep,
    user: CurrentUser,
    attempt: Annotated[int, Query(ge=1, description="the attempt that hung")],
) -> PlainTextResponse:
    """Every rank's stacks, dumped when the hang watch found this attempt hung."""
    files = files_for(st.settings)
    text = job_stacks_domain(st.db, files, principal=user, job_id=job_id, attempt=attempt)
    return PlainTextResponse(text)


@router.get("/jobs/{job_id}/metrics", response_model=MetricsPage, responses=_ERRORS)
def list_metrics(
    job_id: str,
    st: StateDep,
    user: CurrentUser,
    limit: Limit,
    cursor: str | None = None,
    after: Annotated[int | None, Query(ge=0, description="a point id; newer points only")] = None,
    name: Annotated[list[str] | None, Query()] = None,
    attempts: Annotated[
        Literal["latest", "all"],
        Query(description="latest: each step's point from the newest attempt that ran it; all"),
    ] = "latest",
) -> MetricsPage:
    """Metric points in arrival order; a step re-run by a resumed attempt appears once (the
    newest attempt's point) unless ``attempts=all``."""
    names = [n for v in name or [] for n in v.split(",") if n]
    return st.db.read(
        lambda s: jobs.list_metrics(
            s,
            principal=user,
            job_id=job_id,
            limit=limit,
            cursor=cursor,
            after=after,
            names=names,
            all_attempts=attempts == "all",
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


@router.get(
    "/jobs/{job_id}/logs",
    response_model=LogsRead,
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}}},
)
def job_logs(
    job_id: str,
    request: Request,
    st: StateDep,
    user: CurrentUser,
    attempt: Annotated[int | None, Query(ge=1, description="default: the current one")] = None,
    offset: Annotated[int | None, Query(ge=0, description="byte offset to read from")] = None,
    limit: Annotated[int | None, Query(ge=1, description="bytes; clamped to the max page")] = None,
    tail: Annotated[int | None, Query(ge=1, description="the last N bytes instead")] = None,
    follow: bool = False,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """An attempt's output by byte range (``next_offset`` reads on), its tail, or, with
    ``follow=true``, streamed over SSE from ``offset`` (or ``Last-Event-ID``)."""
    page_max = st.settings.log_page_max_bytes
    if follow:
        st.db.read(lambda s: jobs.visible_job(s, principal=user, job_id=job_id))
        resume = (last_event_id or "").strip()
        start = int(resume) if resume.isdigit() else offset or 0
        return StreamingResponse(
            log_stream.follow(request, st, user, job_id, attempt, start),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    store, size = job_logs_domain.store_for(st.settings), min(limit or page_max, page_max)
    page = st.db.read(
        lambda s: job_logs_domain.read_logs(
            s, store, principal=user, job_id=job_id, attempt=attempt, offset=offset,
            limit=size, tail=tail, launcher=st.launcher,
        )
    )  # fmt: skip
    return Response(page.model_dump_json(), media_type="application/json")


@router.get("/queue", response_model=QueuePage, responses=_ERRORS)
def queue(st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None) -> QueuePage:
    """The queue as the scheduler's last tick planned it (stored positions and reasons), a
    page at a time; other teams' jobs are anonymous capacity for a member."""
    return st.db.read(lambda s: queue_page(s, principal=user, limit=limit, cursor=cursor))


@router.get("/cluster", response_model=ClusterRead, responses=_ERRORS)
def cluster(st: StateDep, _user: CurrentUser) -> ClusterRead:
    """The cluster now (read from the launcher; 503 when Ray cannot be reached)."""
    try:
        c = st.clusters().refresh()
    except Exception as e:
        raise Unavailable(f"the cluster (Ray) is unreachable: {type(e).__name__}: {e}"[:500]) from e
    return ClusterRead(
        nodes=list(c.nodes),
        total_cpus=c.total_cpus,
        free_cpus=c.free_cpus,
        total_gpus=c.total_gpus,
        free_gpus=c.free_gpus,
        by_type=capacity_by_type(c, admin_catalog(st.settings.accelerator_types)),
    )


def capacity_by_type(
    c: ClusterResources, admin: Mapping[str, AcceleratorType]
) -> dict[str, TypeCapacity]:
    """Per accelerator type its alive nodes' GPUs, free and total ("" = GPUs of no type)."""
    out: dict[str, TypeCapacity] = {}
    for n in c.nodes:
        if not n.alive or (n.total_gpus <= 0 and not n.accelerator):
            continue
        t = out.get(n.accelerator)
        known = admin.get(n.accelerator)
        mem = KNOWN_MEMORY_GB.get(n.accelerator)
        out[n.accelerator] = TypeCapacity(
            nodes=(t.nodes if t else 0) + 1,
            total_gpus=(t.total_gpus if t else 0.0) + n.total_gpus,
            free_gpus=(t.free_gpus if t else 0.0) + n.free_gpus,
            memory_gb=known.memory_gb if known is not None and known.memory_bytes else mem,
            weight=known.weight if known is not None else 1.0,
        )
    return dict(sorted(out.items()))
