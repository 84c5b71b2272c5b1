"""Teams, tokens and whoami."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from service.accounts import teams
from service.db.sqltime import as_utc
from service.http.deps import CurrentUser, StateDep
from service.policy.accelerators import gpu_weights
from service.schemas import teams as api
from service.schemas.base import ErrorBody

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["teams"],
    responses={c: {"model": ErrorBody} for c in (401, 403, 404, 409, 422)},
)


@router.get("/whoami", response_model=api.WhoAmI)
async def whoami(user: CurrentUser) -> api.WhoAmI:
    return api.WhoAmI(token_id=user.token_id, team=user.team, role=user.role, name=user.name)


@router.post("/teams", status_code=201, response_model=api.TeamRead)
def create_team(body: api.TeamCreate, st: StateDep, user: CurrentUser) -> api.TeamRead:
    return teams.create_team(st.db, principal=user, body=body)


@router.get("/teams", response_model=api.TeamsPage)
def list_teams(st: StateDep, user: CurrentUser) -> api.TeamsPage:
    return st.db.read(
        lambda s: teams.list_teams(s, principal=user, weights=gpu_weights(st.settings))
    )


@router.patch("/teams/{name}", response_model=api.TeamRead)
def patch_team(name: str, body: api.TeamPatch, st: StateDep, user: CurrentUser) -> api.TeamRead:
    return teams.patch_team(
        st.db, principal=user, name=name, body=body, weights=gpu_weights(st.settings)
    )


@router.get("/teams/{name}/usage", response_model=api.TeamUsageRead)
def team_usage(
    name: str, st: StateDep, user: CurrentUser, since: datetime | None = None
) -> api.TeamUsageRead:
    """GPU- and CPU-seconds held by the team's attempts since ``since`` (ISO 8601)."""
    until = datetime.now(UTC)
    since = as_utc(since)  # a time without a zone is UTC
    return st.db.read(
        lambda s: teams.team_usage(
            s,
            principal=user,
            name=name,
            since=since,
            until=until,
            weights=gpu_weights(st.settings),
        )
    )


@router.post("/tokens", status_code=201, response_model=api.TokenCreated)
def issue_token(body: api.TokenCreate, st: StateDep, user: CurrentUser) -> api.TokenCreated:
    return teams.issue_token(st.db, principal=user, body=body)


@router.get("/tokens", response_model=api.TokensPage)
def list_tokens(st: StateDep, user: CurrentUser) -> api.TokensPage:
    return st.db.read(lambda s: teams.list_tokens(s, principal=user))


@router.delete("/tokens/{token_id}", response_model=api.TokenRead)
def revoke_token(token_id: str, st: StateDep, user: CurrentUser) -> api.TokenRead:
    revoked = teams.revoke_token(st.db, principal=user, token_id=token_id)
    st.tokens.clear()  # this process forgets at once; others within auth_cache_seconds
    return revoked
