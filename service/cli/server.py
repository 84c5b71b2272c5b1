"""Server-side commands: ``shunter serve``, ``shunter db upgrade|downgrade``,
``shunter scheduler`` (the scheduler as its own process).

``serve`` adds ``../shared/data`` next to the repository to the data roots when
``SHUNTER_DATA_ROOTS`` is unset and that directory exists (the team's shared SST-2 and
Shakespeare data), after ``$SHUNTER_HOME/data``.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]

_REPO = Path(__file__).resolve().parents[2]


def _default_data_roots() -> None:
    shared = (_REPO / ".." / "shared" / "data").resolve()
    if "SHUNTER_DATA_ROOTS" not in os.environ and shared.is_dir():
        home = Path(os.environ.get("SHUNTER_HOME", ".shunter")).expanduser().resolve()
        os.environ["SHUNTER_DATA_ROOTS"] = f"{home / 'data'}:{shared}"


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (SHUNTER_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (SHUNTER_PORT).")] = None,
    workers: Annotated[int, typer.Option(help="Uvicorn worker processes.")] = 1,
) -> None:
    """Serve the API (embedded SQLite and a local Ray head unless configured otherwise)."""
    import uvicorn

    from service.app import create_app
    from service.settings import Settings

    if host is not None:
        os.environ["SHUNTER_HOST"] = host
    if port is not None:
        os.environ["SHUNTER_PORT"] = str(port)
    _default_data_roots()
    settings = Settings()
    if workers > 1:
        # Each worker builds its own app via the factory; only one may run the scheduler.
        os.environ.setdefault("SHUNTER_RUN_SCHEDULER", "false")
        uvicorn.run(
            "service.cli.server:_factory",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=workers,
            log_level="warning",
            access_log=False,
        )
        return
    typer.echo(f"shunter: API on http://{settings.host}:{settings.port}  home {settings.home}")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=False,
    )


def _factory() -> object:
    from service.app import create_app

    return create_app()


db_app = typer.Typer(help="Database schema migrations (Alembic).", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Migrate the database (SHUNTER_DATABASE_URL) up to REVISION."""
    from service.db.migrate import upgrade
    from service.settings import Settings

    settings = Settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database_url, revision)
    typer.echo(f"upgraded to {revision}")


@db_app.command("downgrade")
def db_downgrade(revision: Annotated[str, typer.Argument()] = "base") -> None:
    """Migrate the database down to REVISION (default: base, i.e. drop everything)."""
    from service.db.migrate import downgrade
    from service.settings import Settings

    downgrade(Settings().database_url, revision)
    typer.echo(f"downgraded to {revision}")


def scheduler() -> None:
    """Run only the scheduler loop (the API then runs with SHUNTER_RUN_SCHEDULER=false)."""
    import importlib

    from service.db.engine import Database
    from service.launcher import load_launcher
    from service.settings import Settings

    _default_data_roots()
    settings = Settings()
    db = Database(settings.database_url)
    launcher = load_launcher(settings.launcher, settings)
    sched = importlib.import_module("service.scheduler").Scheduler(settings, db, launcher)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    sched.start()
    typer.echo("shunter: scheduler running; Ctrl-C stops it")
    try:
        done.wait()
    finally:
        sched.stop()
        launcher.close()
        db.dispose()


def register(app: typer.Typer) -> None:
    """Add this module's commands to app."""
    app.command("serve")(serve)
    app.command("scheduler")(scheduler)
    app.add_typer(db_app, name="db")
