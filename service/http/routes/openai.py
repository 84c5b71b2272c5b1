"""OpenAI-compatible routes: ``/v1/files``, ``/v1/fine_tuning/jobs``, ``/v1/models``.

Thin: parse, call ``service.openai``, return the OpenAI object. The API key is a Shunter
bearer token (``CurrentUser``); errors here use OpenAI's ``{"error": {...}}`` shape
(``service.http.error_mapping``). Where we differ from OpenAI: ``docs/openai.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.concurrency import run_in_threadpool

from service.http.deps import AppState, CurrentUser, StateDep
from service.openai import fine_tuning as ft
from service.openai.catalog import CatalogModel, load_catalog
from service.openai.files import create_file, delete_file, get_file, list_files
from service.schemas.openai import (
    CheckpointsList,
    DeletedFile,
    EventsList,
    FileObject,
    FilesList,
    FineTuningJobCreate,
    FineTuningJobObject,
    FineTuningJobsList,
    ModelsList,
    OpenAIErrorBody,
)

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["openai"],
    responses={c: {"model": OpenAIErrorBody} for c in (400, 401, 403, 404, 409, 413, 422)},
)
PageLimit = Annotated[int, Query(ge=1, le=100, description="OpenAI's page size, 1..100")]


async def _catalog(st: StateDep) -> dict[str, CatalogModel]:
    catalog: dict[str, CatalogModel] | None = st.extras.get("openai_catalog")
    if catalog is None:
        catalog = st.extras["openai_catalog"] = load_catalog(st.settings.model_catalog)
    return catalog


CatalogDep = Annotated[dict[str, CatalogModel], Depends(_catalog)]


# ---------------------------------------------------------------- files


@router.post("/files", response_model=FileObject)
async def upload_file(
    st: StateDep,
    user: CurrentUser,
    file: Annotated[UploadFile, File(description="JSONL, one chat example per line")],
    purpose: Annotated[str, Form()],
) -> FileObject:
    content = await file.read()
    info = await run_in_threadpool(
        lambda: create_file(
            st.db,
            principal=user,
            filename=file.filename or "",
            purpose=purpose,
            content=content,
            storage=st.settings.storage,
        )
    )
    return FileObject(**_file_fields(info))


def _file_fields(info: Any) -> dict[str, Any]:
    keys = ("id", "bytes", "created_at", "filename", "purpose")
    return {k: getattr(info, k) for k in keys}


@router.get("/files", response_model=FilesList)
def files_list(
    st: StateDep,
    user: CurrentUser,
    limit: PageLimit = 100,
    after: str | None = None,
    purpose: str | None = None,
) -> FilesList:
    infos, more = st.db.read(
        lambda s: list_files(s, principal=user, limit=limit, after=after, purpose=purpose)
    )
    return FilesList.of([FileObject(**_file_fields(i)) for i in infos], more)


@router.get("/files/{file_id}", response_model=FileObject)
def file_get(file_id: str, st: StateDep, user: CurrentUser) -> FileObject:
    info = st.db.read(lambda s: get_file(s, principal=user, file_id=file_id))
    return FileObject(**_file_fields(info))


@router.delete("/files/{file_id}", response_model=DeletedFile)
def file_delete(file_id: str, st: StateDep, user: CurrentUser) -> DeletedFile:
    return DeletedFile(
        id=delete_file(st.db, principal=user, file_id=file_id, storage=st.settings.storage)
    )


# ---------------------------------------------------------------- fine-tuning jobs


@router.post("/fine_tuning/jobs", response_model=FineTuningJobObject)
def create_job(
    body: FineTuningJobCreate, st: StateDep, user: CurrentUser, catalog: CatalogDep
) -> dict[str, Any]:
    cluster = st.clusters().seen().cluster  # the scheduler's last view: no call to Ray
    return ft.create_ft_job(
        st.db,
        principal=user,
        req=body,
        catalog=catalog,
        data_roots=st.settings.data_roots,
        storage=st.settings.storage,
        cluster=cluster,
    )


_P = TypeVar("_P", FineTuningJobsList, EventsList, CheckpointsList)


def _page(st: AppState, page: type[_P], lister: Callable[..., Any], **query: Any) -> _P:
    """One fine-tuning list page, read in one transaction: ``lister(session, **query)`` gives
    the page's objects and whether more follow."""
    data, more = st.db.read(lambda s: lister(s, **query))
    return page.of(data, more)


@router.get("/fine_tuning/jobs", response_model=FineTuningJobsList)
def list_jobs(
    st: StateDep, user: CurrentUser, limit: PageLimit = 20, after: str | None = None
) -> FineTuningJobsList:
    return _page(st, FineTuningJobsList, ft.list_ft_jobs, principal=user, limit=limit, after=after)


@router.get("/fine_tuning/jobs/{ft_id}", response_model=FineTuningJobObject)
def get_job(ft_id: str, st: StateDep, user: CurrentUser) -> dict[str, Any]:
    return st.db.read(lambda s: ft.get_ft_job(s, principal=user, ft_id=ft_id))


@router.post("/fine_tuning/jobs/{ft_id}/cancel", response_model=FineTuningJobObject)
def cancel_job(ft_id: str, st: StateDep, user: CurrentUser) -> dict[str, Any]:
    return ft.cancel_ft_job(st.db, principal=user, ft_id=ft_id, launcher=st.need_launcher())


@router.post("/fine_tuning/jobs/{ft_id}/pause", response_model=FineTuningJobObject)
def pause_job(ft_id: str, st: StateDep, user: CurrentUser) -> dict[str, Any]:
    return ft.pause_ft_job(st.db, principal=user, ft_id=ft_id)


@router.post("/fine_tuning/jobs/{ft_id}/resume", response_model=FineTuningJobObject)
def resume_job(ft_id: str, st: StateDep, user: CurrentUser) -> dict[str, Any]:
    return ft.resume_ft_job(st.db, principal=user, ft_id=ft_id)


def _ft_list(path: str, page: type[_P], lister: Callable[..., Any], n: int, name: str) -> None:
    """A fine-tuning job's events or checkpoints, ``n`` a page unless asked otherwise;
    ``name``: the route's name."""

    def list_(
        ft_id: str, st: StateDep, user: CurrentUser, limit: PageLimit = n, after: str | None = None
    ) -> _P:
        query = {"principal": user, "ft_id": ft_id, "limit": limit, "after": after}
        return _page(st, page, lister, **query)

    router.add_api_route(path, list_, methods=["GET"], response_model=page, name=name)


_ft_list("/fine_tuning/jobs/{ft_id}/events", EventsList, ft.list_ft_events, 20, "list_events")
_ft_list(
    "/fine_tuning/jobs/{ft_id}/checkpoints",
    CheckpointsList,
    ft.list_ft_checkpoints,
    10,
    "list_checkpoints",
)


# ---------------------------------------------------------------- models


@router.get("/models", response_model=ModelsList)
def models(st: StateDep, user: CurrentUser, catalog: CatalogDep) -> ModelsList:
    data = st.db.read(lambda s: ft.list_models(s, principal=user, catalog=catalog))
    return ModelsList.model_validate({"data": data})
