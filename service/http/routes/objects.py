"""Team datasets and base models in the store: ``/v1/datasets`` and ``/v1/models``.

Thin: parse, call ``service.objects.store``, return the object. An upload is a multipart form:
one or more ``file`` parts (each part's filename is its path inside the dataset or model
folder) and an optional ``name``. The parts are spooled to disk as they arrive (never whole
in memory), copied into a staging folder, checked, and written to the store, manifest last;
a client that stops mid-body, a bad file or a failed write stores nothing. ``GET /v1/models``
stays OpenAI's model list; uploaded base models are listed at ``GET /v1/models/uploaded``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict

from service.http.deps import CurrentUser, Limit, StateDep
from service.objects.store import (
    ObjectInfo,
    Upload,
    create_object,
    delete_object,
    get_object,
    list_objects,
    staged,
)
from service.schemas import ErrorBody

__all__ = ["ObjectRead", "ObjectsPage", "router"]

router = APIRouter(
    prefix="/v1",
    tags=["data"],
    responses={c: {"model": ErrorBody} for c in (400, 401, 403, 404, 413, 422)},
)


class ObjectRead(BaseModel):
    """A team's dataset (``ds-...``) or base model (``mdl-...``) in the store."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str  # dataset | model
    name: str
    digest: str  # SHA-256 of the object's manifest: objects/<digest>/ in storage
    format: str  # jsonl | json | csv | tsv | txt | parquet (datasets); hf (models)
    columns: list[str]
    rows: int | None
    sample: list[Any]
    files: list[str]
    bytes: int
    created_at: int  # unix seconds


class ObjectsPage(BaseModel):
    data: list[ObjectRead]
    next_cursor: str | None


def _read(info: ObjectInfo) -> ObjectRead:
    return ObjectRead(**info.__dict__)


async def _upload(
    st: StateDep, user: CurrentUser, kind: str, files: list[UploadFile], name: str | None
) -> ObjectRead:
    uploads = [Upload(f.filename or f"upload-{i}", f.file) for i, f in enumerate(files)]

    def _run() -> ObjectInfo:
        with staged(uploads, max_bytes=st.settings.max_object_bytes) as folder:
            return create_object(
                st.db,
                principal=user,
                kind=kind,
                name=name or "",
                folder=folder,
                root=st.settings.storage,
                allow_pickle_weights=st.settings.allow_pickle_weights,
            )

    try:
        return _read(await run_in_threadpool(_run))
    finally:
        for f in files:
            await f.close()


def _page(infos: list[ObjectInfo], more: bool) -> ObjectsPage:
    return ObjectsPage(
        data=[_read(i) for i in infos], next_cursor=infos[-1].id if more and infos else None
    )


# ---------------------------------------------------------------- datasets


@router.post("/datasets", response_model=ObjectRead, status_code=201)
async def upload_dataset(
    st: StateDep,
    user: CurrentUser,
    file: Annotated[
        list[UploadFile],
        File(description="the dataset's file(s); a part's filename is its path in the dataset"),
    ],
    name: Annotated[str | None, Form(max_length=255)] = None,
) -> ObjectRead:
    """Upload a dataset (jsonl, json, csv, tsv, txt or parquet; one file or a folder of one
    format), checked before it is stored: format, columns, rows, a sample."""
    return await _upload(st, user, "dataset", file, name)


@router.get("/datasets", response_model=ObjectsPage)
def list_datasets(
    st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None
) -> ObjectsPage:
    return _page(
        *st.db.read(
            lambda s: list_objects(s, principal=user, kind="dataset", limit=limit, after=cursor)
        )
    )


@router.get("/datasets/{object_id}", response_model=ObjectRead)
def show_dataset(object_id: str, st: StateDep, user: CurrentUser) -> ObjectRead:
    return _read(
        st.db.read(lambda s: get_object(s, principal=user, object_id=object_id, kind="dataset"))
    )


@router.delete("/datasets/{object_id}", status_code=204)
def delete_dataset(object_id: str, st: StateDep, user: CurrentUser) -> None:
    """Hide the dataset; its bytes stay while a job that used it exists."""
    delete_object(
        st.db, principal=user, object_id=object_id, kind="dataset", root=st.settings.storage
    )


# ---------------------------------------------------------------- base models


@router.post("/models", response_model=ObjectRead, status_code=201)
async def upload_model(
    st: StateDep,
    user: CurrentUser,
    file: Annotated[
        list[UploadFile],
        File(description="an HF-layout folder: config.json, *.safetensors, tokenizer files"),
    ],
    name: Annotated[str | None, Form(max_length=255)] = None,
) -> ObjectRead:
    """Upload a base model folder, checked before it is stored (config, weights, tokenizer)."""
    return await _upload(st, user, "model", file, name)


@router.get("/models/uploaded", response_model=ObjectsPage)
def list_uploaded_models(
    st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None
) -> ObjectsPage:
    return _page(
        *st.db.read(
            lambda s: list_objects(s, principal=user, kind="model", limit=limit, after=cursor)
        )
    )


@router.get("/models/{object_id}", response_model=ObjectRead)
def show_model(object_id: str, st: StateDep, user: CurrentUser) -> ObjectRead:
    return _read(
        st.db.read(lambda s: get_object(s, principal=user, object_id=object_id, kind="model"))
    )


@router.delete("/models/{object_id}", status_code=204)
def delete_model(object_id: str, st: StateDep, user: CurrentUser) -> None:
    """Hide the model; its bytes stay while a job that used it exists."""
    delete_object(
        st.db, principal=user, object_id=object_id, kind="model", root=st.settings.storage
    )
