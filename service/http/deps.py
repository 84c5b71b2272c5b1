"""Per-app state and the ``Annotated`` dependency aliases routes use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from service.accounts.auth import Principal, TokenCache, bearer_hash, lookup_principal
from service.accounts.data_roots import roots_for
from service.db.engine import Database
from service.db.paging import clamp_limit
from service.jobs.phases import PhaseMark
from service.jobs.submit import SubmitContext
from service.launch import Launcher
from service.scheduler.cluster_view import ClusterView
from service.settings import Settings

__all__ = ["AppState", "CurrentUser", "Limit", "StateDep", "SubmitCtx", "app_state"]


@dataclass(kw_only=True)
class AppState:
    settings: Settings
    db: Database
    tokens: TokenCache
    launcher: Launcher | None = None
    scheduler: Any = None
    cluster_view: ClusterView | None = None  # shared with the scheduler, which refreshes it
    extras: dict[str, Any] = field(default_factory=dict)
    # The start-up phase histogram (``http.prometheus``); a no-op until the app sets it.
    on_phase: Callable[[PhaseMark], None] = lambda _mark: None

    def clusters(self) -> ClusterView:
        """The cluster as the scheduler's last tick read it (``scheduler.cluster_view``)."""
        if self.cluster_view is None:
            # A process whose scheduler ticks refreshes every tick; one without re-reads a
            # view older than a few ticks on demand.
            max_age = max(5.0, 3 * float(self.settings.scheduler_interval_s))
            self.cluster_view = ClusterView(
                self.need_launcher(),
                max_age_s=max_age,
                node_types=self.settings.node_group_accelerators,
            )
        return self.cluster_view

    def wake_scheduler(self) -> None:
        """Something for the scheduler (a submit): this process's scheduler ticks now rather
        than at its next interval. Another process's leader sees it at its own tick."""
        if self.scheduler is not None:
            self.scheduler.wake()

    def observe_phase(self, mark: PhaseMark | None) -> None:
        if mark is not None:
            self.on_phase(mark)

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


async def submit_context(st: StateDep, user: CurrentUser) -> SubmitContext:
    """What a submit (or a dry run) needs from the server: data roots (the server's and the
    team's), storage, the scheduler's last view of the cluster (never a call to Ray while it
    is fresh: ``scheduler.cluster_view``), the Hub policy and the admin flags."""
    team_roots = await run_in_threadpool(lambda: st.db.read(lambda s: roots_for(s, team=user.team)))
    seen = await run_in_threadpool(st.clusters().seen)
    note = None
    if seen.error and seen.age_s is not None:
        note = f"the cluster as last read {seen.age_s:.0f} s ago; reading it now fails"
    return SubmitContext.from_settings(
        st.settings, team_roots=team_roots, cluster=seen.cluster, cluster_note=note
    )


SubmitCtx = Annotated[SubmitContext, Depends(submit_context)]
