"""``create_app(settings, *, launcher=None) -> FastAPI``: the whole service in one object.

Built eagerly (so a plain ``TestClient(app)`` works): settings, database (migrated first when
embedded SQLite, or ``SHUNTER_MIGRATE_ON_START``), ``$SHUNTER_HOME`` seeded, the first admin
token. In the lifespan: the launcher is loaded (unless one was passed), the scheduler thread
started (``service.scheduler.loop.Scheduler(settings, db, launcher)`` when that module exists and
``run_scheduler`` is on; ``db`` is a ``Database``, also callable as a write-session factory),
and on shutdown everything is stopped in reverse order.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.staticfiles import StaticFiles

from service.accounts.auth import TokenCache, bootstrap_admin
from service.db.engine import Database
from service.db.migrate import upgrade
from service.home import seed_home
from service.http import docs
from service.http import sse as stream
from service.http.deps import AppState
from service.http.error_mapping import install_error_handlers
from service.http.job_poll import JobPollMiddleware
from service.http.middleware import (
    BodyLimitMiddleware,
    RateLimitMiddleware,
    RequestMetricsMiddleware,
    SecurityHeadersMiddleware,
)
from service.http.prometheus import build_metrics
from service.http.routes import (
    data_roots,
    downloads,
    housekeeping,
    internal,
    jobs,
    jobspec,
    nodes,
    objects,
    openai,
    ops,
    sweeps,
    teams,
    webhooks,
)
from service.http.straggler_metrics import StragglerCollector
from service.http.webhook_metrics import WebhookCollector
from service.jobs.hub import resolve_hub_access
from service.launch import Launcher, load_launcher
from service.scheduler.loop import Scheduler
from service.settings import Settings
from service.sweeps.controller import SweepController
from service.webhooks.sender import DeliveryConfig, DeliveryWorker

__all__ = ["create_app"]

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent / "http" / "static"


def _start_scheduler(state: AppState) -> Scheduler | None:
    if not state.settings.run_scheduler:
        return None
    scheduler = Scheduler(
        state.settings,
        state.db,
        state.need_launcher(),
        on_phase=state.on_phase,
        cluster_view=state.clusters(),  # the view submits check against
    )
    scheduler.start()
    return scheduler


def _start_sweeps(state: AppState) -> SweepController | None:
    """The sweep controller runs wherever the scheduler does (one acts, under its lease)."""
    if not state.settings.run_scheduler:
        return None
    controller = SweepController(state.settings, state.db, state.need_launcher())
    controller.start()
    return controller


def _start_webhooks(state: AppState) -> DeliveryWorker | None:
    """The webhook sender runs in every API process (rows are claimed, never sent twice)."""
    if not state.settings.deliver_webhooks:
        return None
    worker = DeliveryWorker(
        db=state.db,
        config=DeliveryConfig.from_settings(state.settings),
        interval_s=state.settings.webhook_interval_s,
    )
    worker.start()
    return worker


def _lifespan(state: AppState, owns_launcher: bool) -> Any:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if state.launcher is None:
            state.launcher = await run_in_threadpool(
                load_launcher, state.settings.launcher, state.settings
            )
        state.scheduler = await run_in_threadpool(_start_scheduler, state)
        sweep_controller = await run_in_threadpool(_start_sweeps, state)
        webhook_worker = _start_webhooks(state)
        # What startup built (modules, routes, models) lives as long as the process: keep it
        # out of the collector's generations, so a full collection under load stays short.
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            if webhook_worker is not None:
                await run_in_threadpool(webhook_worker.stop)
            if sweep_controller is not None:
                await run_in_threadpool(sweep_controller.stop)
            if state.scheduler is not None:
                await run_in_threadpool(state.scheduler.stop)
            if owns_launcher and state.launcher is not None:
                await run_in_threadpool(state.launcher.close)
            state.db.dispose()

    return lifespan


def create_app(settings: Settings | None = None, *, launcher: Launcher | None = None) -> FastAPI:
    settings = settings or Settings()
    seed_home(settings)
    settings.hub_access = resolve_hub_access(settings.hub_access)  # "auto" -> probe once
    if settings.should_migrate_on_start:
        upgrade(settings.database_url)
    db = Database(settings.database_url)
    if settings.create_admin_token and bootstrap_admin(
        db, token_path=settings.admin_token_path, given=settings.admin_token
    ):
        log.warning("created the first admin token in %s", settings.admin_token_path)
    state = AppState(
        settings=settings, db=db, tokens=TokenCache(settings.auth_cache_seconds), launcher=launcher
    )
    metrics = build_metrics(db, scheduler=lambda: state.scheduler)
    metrics.registry.register(WebhookCollector(db))
    metrics.registry.register(StragglerCollector(db))
    state.extras["registry"] = metrics.registry
    state.on_phase = metrics.observe_phase

    app = FastAPI(
        title="Shunter",
        version="1",
        lifespan=_lifespan(state, launcher is None),
        description="Training jobs on a shared cluster. API v1.",
        docs_url=None,  # served from local assets by service.http.docs (no CDN)
        redoc_url=None,
    )
    app.state.shunter = state
    install_error_handlers(app)
    routers = (
        jobs.router,
        stream.router,
        teams.router,
        internal.router,
        ops.router,
        objects.router,
        openai.router,
        downloads.router,
        jobspec.router,
        sweeps.router,
        webhooks.router,
    )
    app.include_router(docs.router)
    app.include_router(housekeeping.router)
    app.include_router(data_roots.router)
    app.include_router(nodes.router)
    for router in routers:
        app.include_router(router)
    # Innermost: polls of one job skip the framework (errors still come from the route).
    app.add_middleware(JobPollMiddleware, threads=settings.poll_threads)
    # Outermost first to run: the body limit sees the request before anything parses it.
    app.add_middleware(RequestMetricsMiddleware, requests=metrics.requests, latency=metrics.latency)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        per_path={
            "/v1/files": settings.max_upload_bytes,
            "/v1/datasets": settings.max_object_bytes,
            "/v1/models": settings.max_object_bytes,
        },
    )
    app.add_middleware(
        RateLimitMiddleware,
        per_minute=settings.rate_limit_per_minute,
        burst=settings.rate_limit_burst,
    )
    app.add_middleware(SecurityHeadersMiddleware)  # outermost: every response has them
    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app
