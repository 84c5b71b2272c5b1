"""``create_app(settings, *, launcher=None) -> FastAPI``: the whole service in one object.

Built eagerly (so a plain ``TestClient(app)`` works): settings, database (migrated first when
embedded SQLite, or ``SHUNTER_MIGRATE_ON_START``), ``$SHUNTER_HOME`` seeded, the first admin
token. In the lifespan: the launcher is loaded (unless one was passed), the scheduler thread
started (``service.scheduler.Scheduler(settings, db, launcher)`` when that module exists and
``run_scheduler`` is on; ``db`` is a ``Database``, also callable as a write-session factory),
and on shutdown everything is stopped in reverse order.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.staticfiles import StaticFiles

from service.api import internal, jobs, ops, stream, teams
from service.api.deps import AppState
from service.api.errors import install_error_handlers
from service.api.fastpath import JobGetFastPath
from service.api.middleware import BodyLimitMiddleware, RequestMetricsMiddleware
from service.auth import TokenCache, bootstrap_admin
from service.db.engine import Database
from service.db.migrate import upgrade
from service.home import seed_home
from service.launcher import Launcher, load_launcher
from service.observability import build_metrics
from service.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent / "static"


def _start_scheduler(state: AppState) -> Any:
    if not state.settings.run_scheduler or importlib.util.find_spec("service.scheduler") is None:
        return None
    module = importlib.import_module("service.scheduler")
    scheduler = module.Scheduler(state.settings, state.db, state.need_launcher())
    scheduler.start()
    return scheduler


def _lifespan(state: AppState, owns_launcher: bool) -> Any:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if state.launcher is None:
            state.launcher = await run_in_threadpool(
                load_launcher, state.settings.launcher, state.settings
            )
        state.scheduler = await run_in_threadpool(_start_scheduler, state)
        try:
            yield
        finally:
            if state.scheduler is not None:
                await run_in_threadpool(state.scheduler.stop)
            if owns_launcher and state.launcher is not None:
                await run_in_threadpool(state.launcher.close)
            state.db.dispose()

    return lifespan


def create_app(settings: Settings | None = None, *, launcher: Launcher | None = None) -> FastAPI:
    settings = settings or Settings()
    seed_home(settings)
    if settings.should_migrate_on_start:
        upgrade(settings.database_url)
    db = Database(settings.database_url)
    if settings.create_admin_token and bootstrap_admin(db, token_path=settings.admin_token_path):
        log.warning("created the first admin token in %s", settings.admin_token_path)
    state = AppState(
        settings=settings, db=db, tokens=TokenCache(settings.auth_cache_seconds), launcher=launcher
    )
    metrics = build_metrics(db)
    state.extras["registry"] = metrics.registry

    app = FastAPI(
        title="Shunter",
        version="1",
        lifespan=_lifespan(state, launcher is None),
        description="Training jobs on a shared cluster. API v1.",
    )
    app.state.shunter = state
    install_error_handlers(app)
    for router in (jobs.router, stream.router, teams.router, internal.router, ops.router):
        app.include_router(router)
    # Outermost first to run: the body limit sees the request before anything parses it.
    app.add_middleware(RequestMetricsMiddleware, requests=metrics.requests, latency=metrics.latency)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Outermost: the polled GET /v1/jobs/{id} skips routing and dependencies (see fastpath).
    app.add_middleware(
        JobGetFastPath, state=state, requests=metrics.requests, latency=metrics.latency
    )
    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app
