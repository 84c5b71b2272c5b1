"""Admin operations on teams and tokens. A token's plaintext is returned once, at issue."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, hash_token, new_token, new_token_id, require_admin
from service.accounts.budgets import apply_budget, budget_read, usage_seconds
from service.db.engine import Database
from service.db.rows import from_row
from service.db.tables import Team, Token, utcnow_py
from service.errors import Conflict, NotFound, Unprocessable
from service.schemas.teams import (
    Quota,
    TeamCreate,
    TeamPatch,
    TeamRead,
    TeamsPage,
    TeamUsageRead,
    TokenCreate,
    TokenCreated,
    TokenRead,
    TokensPage,
)

__all__ = [
    "create_team",
    "issue_token",
    "list_teams",
    "list_tokens",
    "patch_team",
    "revoke_token",
    "team_usage",
]


def _team_read(
    t: Team, session: Session | None = None, weights: Mapping[str, float] | None = None
) -> TeamRead:
    """The team; with a session, its budget and the current period's use too (GPU-hours
    weighted per accelerator type by ``weights``)."""
    quota = from_row(Quota, t, max_gpus_by_type=t.max_gpus_by_type or None)
    return from_row(
        TeamRead,
        t,
        quota=quota if quota.model_dump(exclude_none=True) else None,  # none set: no quota
        budget=None
        if session is None
        else budget_read(session, t, now=datetime.now(UTC), weights=weights),
    )


def create_team(db: Database, *, principal: Principal, body: TeamCreate) -> TeamRead:
    require_admin(principal)
    q = body.quota or Quota()

    def _create(session: Session) -> TeamRead:
        if session.get(Team, body.name) is not None:
            raise Conflict(f"team {body.name!r} already exists")
        team = Team(
            name=body.name,
            weight=body.weight,
            **q.model_dump(),  # the quota's columns: max_gpus, max_cpus, ...
            max_priority=body.max_priority,
        )
        session.add(team)
        session.flush()
        return _team_read(team)

    try:
        return db.write(_create)
    except IntegrityError:
        raise Conflict(f"team {body.name!r} already exists") from None


def patch_team(
    db: Database,
    *,
    principal: Principal,
    name: str,
    body: TeamPatch,
    weights: Mapping[str, float] | None = None,
) -> TeamRead:
    """Change a team's weight, quota fields, max_priority and budget (admin); the scheduler
    reads teams every tick, so the change applies on its next tick; a budget applies to the
    next submit."""
    require_admin(principal)

    def _patch(session: Session) -> TeamRead:
        team = session.get(Team, name)
        if team is None:
            raise NotFound(f"team {name!r} not found")
        if body.weight is not None:
            team.weight = body.weight
        if body.max_priority is not None:
            team.max_priority = body.max_priority
        if body.quota is not None:
            for field in body.quota.model_fields_set:  # null = unlimited
                setattr(team, field, getattr(body.quota, field))
        if "budget" in body.model_fields_set:  # null removes it
            apply_budget(team, body.budget, now=datetime.now(UTC))
        session.flush()
        return _team_read(team, session, weights)

    return db.write(_patch)


def team_usage(
    session: Session,
    *,
    principal: Principal,
    name: str,
    since: datetime | None,
    until: datetime,
    weights: Mapping[str, float] | None = None,
) -> TeamUsageRead:
    """GPU- and CPU-seconds the team's attempts held in [since, until] (default: all time),
    and its budget's current period (used and left); GPU-seconds weighted per accelerator
    type by ``weights``. Members and viewers see only their own team."""
    team = session.get(Team, name)
    if not principal.sees_team(name) or team is None:
        raise NotFound(f"team {name!r} not found")
    start = since or datetime(1970, 1, 1, tzinfo=UTC)
    gpu_s, cpu_s, attempts = usage_seconds(
        session, team=name, since=start, until=until, weights=weights
    )
    return TeamUsageRead(
        team=name,
        since=start,
        until=until,
        gpu_seconds=round(gpu_s, 3),
        cpu_seconds=round(cpu_s, 3),
        attempts=attempts,
        owed_share_seconds=round(team.owed_s, 3),
        budget=budget_read(session, team, now=until, weights=weights),
    )


def list_teams(
    session: Session, *, principal: Principal, weights: Mapping[str, float] | None = None
) -> TeamsPage:
    q = select(Team).order_by(Team.name)
    if not principal.is_admin:
        q = q.where(Team.name == principal.team)
    return TeamsPage(data=[_team_read(t, session, weights) for t in session.execute(q).scalars()])


def issue_token(db: Database, *, principal: Principal, body: TokenCreate) -> TokenCreated:
    require_admin(principal)
    plaintext = new_token()

    def _issue(session: Session) -> TokenCreated:
        if session.get(Team, body.team) is None:
            raise Unprocessable(
                f"team: no team named {body.team!r}; create it first",
                detail=[{"loc": "team", "msg": "unknown team"}],
            )
        tok = Token(
            id=new_token_id(),
            token_hash=hash_token(plaintext),
            team=body.team,
            role=body.role,
            name=body.name,
        )
        session.add(tok)
        session.flush()
        return TokenCreated(id=tok.id, token=plaintext, team=tok.team, role=tok.role, name=tok.name)

    return db.write(_issue)


def list_tokens(session: Session, *, principal: Principal) -> TokensPage:
    require_admin(principal)
    rows = session.execute(select(Token).order_by(Token.created_at, Token.id)).scalars()
    return TokensPage(data=[TokenRead.model_validate(t) for t in rows])


def revoke_token(db: Database, *, principal: Principal, token_id: str) -> TokenRead:
    require_admin(principal)

    def _revoke(session: Session) -> TokenRead:
        tok = session.get(Token, token_id)
        if tok is None:
            raise NotFound(f"token {token_id} not found")
        if tok.revoked_at is None:
            tok.revoked_at = utcnow_py()
            session.flush()
        return TokenRead.model_validate(tok)

    return db.write(_revoke)
