"""``/v1/teams/{name}/data-roots``: per-team data roots (admin adds/removes; members list)."""

from __future__ import annotations

from fastapi import APIRouter

from service.accounts import data_roots
from service.http.deps import CurrentUser, StateDep
from service.schemas.base import ErrorBody
from service.schemas.internal import DataRootIn, DataRootsRead

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["teams"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 404, 422)},
)


@router.get("/teams/{name}/data-roots", response_model=DataRootsRead)
def list_roots(name: str, st: StateDep, user: CurrentUser) -> DataRootsRead:
    roots = st.db.read(lambda s: data_roots.list_roots(s, principal=user, team=name))
    return DataRootsRead(team=name, roots=roots)


@router.post("/teams/{name}/data-roots", response_model=DataRootsRead, status_code=201)
def add_root(name: str, body: DataRootIn, st: StateDep, user: CurrentUser) -> DataRootsRead:
    roots = data_roots.add_root(st.db, principal=user, team=name, path=body.path)
    return DataRootsRead(team=name, roots=roots)


@router.delete("/teams/{name}/data-roots", response_model=DataRootsRead)
def remove_root(name: str, path: str, st: StateDep, user: CurrentUser) -> DataRootsRead:
    roots = data_roots.remove_root(st.db, principal=user, team=name, path=path)
    return DataRootsRead(team=name, roots=roots)
