"""Team datasets and base models in the store: ``/v1/datasets`` and ``/v1/models``.

Thin: parse, call ``service.objects.store``, return the object. An upload is a multipart form:
one or more ``file`` parts (each part's filename is its path inside the dataset or model
folder) and an optional ``name``. The parts are spooled to disk as they arrive (never whole
in memory), copied into a staging folder, checked, and written to the store, manifest last;
a client that stops mid-body, a bad file or a failed write stores nothing. ``GET /v1/models``
stays OpenAI's model list; uploaded base models are listed at ``GET /v1/models/uploaded``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, UploadFile
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

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
from service.schemas.base import ErrorBody

__all__ = ["ObjectRead", "ObjectsPage", "router"]

router = APIRouter(
    prefix="/v1",
    tags=["data"],
    responses={c: {"model": ErrorBody} for c in (400, 401, 403, 404, 413, 422)},
)


ObjectRead = ObjectInfo  # the response: a dataclass, read as is


class ObjectsPage(BaseModel):
    data: list[ObjectRead]
    next_cursor: str | None


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
        return await run_in_threadpool(_run)
    finally:
        for f in files:
            await f.close()


def _page(infos: list[ObjectInfo], more: bool) -> ObjectsPage:
    return ObjectsPage(data=infos, next_cursor=infos[-1].id if more and infos else None)


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


def _reads(kind: str, list_path: str, item_path: str, names: tuple[str, str, str]) -> None:
    """List, show and delete, the same for both kinds: ``names`` are the routes' names."""

    def list_(
        st: StateDep, user: CurrentUser, limit: Limit, cursor: str | None = None
    ) -> ObjectsPage:
        return _page(
            *st.db.read(
                lambda s: list_objects(s, principal=user, kind=kind, limit=limit, after=cursor)
            )
        )

    def show(object_id: str, st: StateDep, user: CurrentUser) -> ObjectRead:
        return st.db.read(lambda s: get_object(s, principal=user, object_id=object_id, kind=kind))

    def delete(object_id: str, st: StateDep, user: CurrentUser) -> None:
        delete_object(
            st.db, principal=user, object_id=object_id, kind=kind, root=st.settings.storage
        )

    hide = f"Hide the {kind}; its bytes stay while a job that used it exists."
    router.add_api_route(
        list_path, list_, methods=["GET"], response_model=ObjectsPage, name=names[0]
    )
    router.add_api_route(item_path, show, methods=["GET"], response_model=ObjectRead, name=names[1])
    router.add_api_route(
        item_path, delete, methods=["DELETE"], status_code=204, name=names[2], description=hide
    )


_reads(
    "dataset",
    "/datasets",
    "/datasets/{object_id}",
    ("list_datasets", "show_dataset", "delete_dataset"),
)
_reads(
    "model",
    "/models/uploaded",
    "/models/{object_id}",
    ("list_uploaded_models", "show_model", "delete_model"),
)
