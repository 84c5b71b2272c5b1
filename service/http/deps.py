"""Per-app state and the ``Annotated`` dependency aliases routes use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from service.accounts.auth import Principal, TokenCache, bearer_hash, lookup_principal
from service.db.engine import Database
from service.db.paging import clamp_limit
from service.launch import Launcher
from service.settings import Settings

__all__ = ["AppState", "CurrentUser", "Limit", "StateDep", "app_state"]


@dataclass(kw_only=True)
class AppState:
    settings: Settings
    db: Database
    tokens: TokenCache
    launcher: Launcher | None = None
    scheduler: Any = None
    extras: dict[str, Any] = field(default_factory=dict)

    def need_launcher(self) -> Launcher:
        if self.launcher is None:
            raise RuntimeError("the launcher is not loaded (app lifespan not started)")
        return self.launcher


# Dependencies are ``async def`` on purpose: a sync one costs a threadpool hop per request.
async def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.shunter
    return state


StateDep = Annotated[AppState, Depends(app_state)]


async def current_user(request: Request, st: StateDep) -> Principal:
    token_hash = bearer_hash(request.headers.get("authorization"))
    cached = st.tokens.get(token_hash)
    if cached is not None:  # the hot path: no database, no thread
        return cached
    return await run_in_threadpool(lookup_principal, st.db, st.tokens, token_hash)


CurrentUser = Annotated[Principal, Depends(current_user)]


async def page_limit(
    st: StateDep, limit: Annotated[int | None, Query(ge=1, le=100_000)] = None
) -> int:
    return clamp_limit(
        limit, default=st.settings.page_limit_default, maximum=st.settings.page_limit_max
    )


Limit = Annotated[int, Depends(page_limit)]
