"""Teams, tokens and whoami."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from service.accounts import teams
from service.http.deps import CurrentUser, StateDep
from service.schemas import (
    ErrorBody,
    TeamCreate,
    TeamPatch,
    TeamRead,
    TeamsPage,
    TeamUsageRead,
    TokenCreate,
    TokenCreated,
    TokenRead,
    TokensPage,
    WhoAmI,
)

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["teams"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 404, 409, 422)},
)


@router.get("/whoami", response_model=WhoAmI)
async def whoami(user: CurrentUser) -> WhoAmI:
    return WhoAmI(token_id=user.token_id, team=user.team, role=user.role, name=user.name)


@router.post("/teams", status_code=201, response_model=TeamRead)
def create_team(body: TeamCreate, st: StateDep, user: CurrentUser) -> TeamRead:
    return teams.create_team(st.db, principal=user, body=body)


@router.get("/teams", response_model=TeamsPage)
def list_teams(st: StateDep, user: CurrentUser) -> TeamsPage:
    return st.db.read(lambda s: teams.list_teams(s, principal=user))


@router.patch("/teams/{name}", response_model=TeamRead)
def patch_team(name: str, body: TeamPatch, st: StateDep, user: CurrentUser) -> TeamRead:
    return teams.patch_team(st.db, principal=user, name=name, body=body)


@router.get("/teams/{name}/usage", response_model=TeamUsageRead)
def team_usage(
    name: str, st: StateDep, user: CurrentUser, since: datetime | None = None
) -> TeamUsageRead:
    """GPU- and CPU-seconds held by the team's attempts since ``since`` (ISO 8601)."""
    until = datetime.now(UTC)
    since = since.replace(tzinfo=UTC) if since is not None and since.tzinfo is None else since
    return st.db.read(
        lambda s: teams.team_usage(s, principal=user, name=name, since=since, until=until)
    )


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def issue_token(body: TokenCreate, st: StateDep, user: CurrentUser) -> TokenCreated:
    return teams.issue_token(st.db, principal=user, body=body)


@router.get("/tokens", response_model=TokensPage)
def list_tokens(st: StateDep, user: CurrentUser) -> TokensPage:
    return st.db.read(lambda s: teams.list_tokens(s, principal=user))


@router.delete("/tokens/{token_id}", response_model=TokenRead)
def revoke_token(token_id: str, st: StateDep, user: CurrentUser) -> TokenRead:
    revoked = teams.revoke_token(st.db, principal=user, token_id=token_id)
    st.tokens.clear()  # this process forgets at once; others within auth_cache_seconds
    return revoked
