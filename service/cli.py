"""Server-side commands: ``shunter serve``, ``shunter db upgrade|downgrade``,
``shunter scheduler`` (the scheduler as its own process).

Data roots when ``SHUNTER_DATA_ROOTS`` is unset: ``$SHUNTER_HOME/data``, which start-up seeds
with the MiniLM model and the repository's ``examples/data`` (so a lone clone runs the
quickstart), then ``../shared/data`` beside the repository when that directory exists (the
team's full corpora; a file of the same relative name in the first root wins).
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]

_REPO = Path(__file__).resolve().parents[1]
_JOB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")  # no separators: a path component


def _default_data_roots() -> None:
    shared = (_REPO / ".." / "shared" / "data").resolve()
    if "SHUNTER_DATA_ROOTS" not in os.environ and shared.is_dir():
        home = Path(os.environ.get("SHUNTER_HOME", ".shunter")).expanduser().resolve()
        os.environ["SHUNTER_DATA_ROOTS"] = f"{home / 'data'}:{shared}"


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (SHUNTER_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (SHUNTER_PORT).")] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="API worker processes (one Ray head, one scheduler).")
    ] = 1,
    ssl_certfile: Annotated[
        Path | None, typer.Option(help="Serve HTTPS with this PEM certificate (chain).")
    ] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option(help="Private key of --ssl-certfile.")] = None,
) -> None:
    """Serve the API (embedded SQLite and a local Ray head unless configured otherwise)."""
    import uvicorn

    from service.app import create_app
    from service.settings import Settings

    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise typer.BadParameter("give both --ssl-certfile and --ssl-keyfile, or neither")
    os.umask(0o077)  # database, tokens, logs and checkpoints: owner-only (0600/0700)
    if host is not None:
        os.environ["SHUNTER_HOST"] = host
    if port is not None:
        os.environ["SHUNTER_PORT"] = str(port)
    _default_data_roots()
    settings = Settings()
    tls: dict[str, str] = {}
    if ssl_certfile is not None and ssl_keyfile is not None:
        tls = {"ssl_certfile": str(ssl_certfile), "ssl_keyfile": str(ssl_keyfile)}
    scheme = "https" if tls else "http"
    if workers > 1:
        _serve_workers(settings, workers, tls)
        return
    typer.echo(f"shunter: API on {scheme}://{settings.host}:{settings.port}  home {settings.home}")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=False,
        **tls,  # type: ignore[arg-type]
    )


def _serve_workers(settings: object, workers: int, tls: dict[str, str]) -> None:
    """N uvicorn workers over ONE Ray head and ONE scheduler, both in this (parent) process.

    The parent migrates the database, loads the launcher (which starts the embedded head when
    ``SHUNTER_RAY_ADDRESS`` is unset) and runs the scheduler; the workers get the head's
    address in their environment (so each connects to it instead of starting its own) and
    ``SHUNTER_RUN_SCHEDULER=false``.
    """
    import uvicorn

    from service.db.engine import Database
    from service.db.migrate import upgrade
    from service.home import seed_home
    from service.jobs.hub import resolve_hub_access
    from service.launch import load_launcher
    from service.scheduler.loop import Scheduler
    from service.settings import Settings

    assert isinstance(settings, Settings)
    seed_home(settings)
    if settings.should_migrate_on_start:
        upgrade(settings.database_url)
    db = Database(settings.database_url)
    settings.hub_access = resolve_hub_access(settings.hub_access)  # the launcher's HF env
    launcher = load_launcher(settings.launcher, settings)
    config = getattr(launcher, "config", None)
    if not settings.ray_address and getattr(config, "dashboard_url", None):
        # Workers join this head; Ray's token (RAY_AUTH_TOKEN) is already in os.environ.
        os.environ["SHUNTER_RAY_ADDRESS"] = str(config.dashboard_url)  # type: ignore[union-attr]
        if getattr(config, "gcs_address", None):
            os.environ["SHUNTER_RAY_GCS_ADDRESS"] = str(config.gcs_address)  # type: ignore[union-attr]
    os.environ["SHUNTER_RUN_SCHEDULER"] = "false"
    os.environ["SHUNTER_MIGRATE_ON_START"] = "false"
    sched = None
    if settings.run_scheduler:
        sched = Scheduler(settings, db, launcher)
        sched.start()
    typer.echo(
        f"shunter: API on {settings.host}:{settings.port} ({workers} workers, one Ray head, "
        f"{'one scheduler' if sched else 'no scheduler'})  home {settings.home}"
    )
    try:
        uvicorn.run(
            "service.cli:_factory",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=workers,
            log_level="warning",
            access_log=False,
            **tls,  # type: ignore[arg-type]
        )
    finally:
        if sched is not None:
            sched.stop()
        launcher.close()
        db.dispose()


def _factory() -> object:
    from service.app import create_app

    return create_app()


def tensorboard(
    jobs: Annotated[list[str], typer.Argument(help="Job ids (one or several).")],
    port: Annotated[int, typer.Option(help="TensorBoard's port.")] = 6006,
    host: Annotated[str, typer.Option(help="TensorBoard's bind address.")] = "127.0.0.1",
) -> None:
    """Start TensorBoard over jobs run with training.report_to: [tensorboard].

    Reads the event files in the server's storage (SHUNTER_STORAGE, a local path): run it on
    the machine, or a machine mounting the storage, where the service keeps job outputs.
    """
    from service.settings import Settings

    storage = Settings().storage
    if "://" in storage:
        raise typer.BadParameter(f"SHUNTER_STORAGE {storage} is not a local path", param_hint="")
    runs = []
    for job in jobs:
        events = Path(storage) / job / "tensorboard"
        if not _JOB_ID_RE.fullmatch(job) or not events.is_dir():
            typer.echo(
                f"{job}: no TensorBoard events at {events}; was it submitted with "
                "training.report_to: [tensorboard]?",
                err=True,
            )
            raise typer.Exit(2)
        runs.append(f"{job}:{events}")
    if importlib.util.find_spec("tensorboard") is None:
        typer.echo("tensorboard is not installed: pip install 'shunter[tracking]'", err=True)
        raise typer.Exit(2)
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir_spec", ",".join(runs)]
    typer.echo(f"shunter: TensorBoard on http://{host}:{port}/ over {len(runs)} job(s)")
    os.execv(sys.executable, [*cmd, "--host", host, "--port", str(port)])


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
def db_downgrade(
    revision: Annotated[
        str, typer.Argument(help="Target revision id, '-1' for one step, or 'base' (drops all).")
    ],
) -> None:
    """Migrate the database down to REVISION; there is no default (``base`` drops every table)."""
    from service.db.migrate import downgrade
    from service.settings import Settings

    downgrade(Settings().database_url, revision)
    typer.echo(f"downgraded to {revision}")


def scheduler() -> None:
    """Run only the scheduler loop and the sweep controller (the API then runs with
    SHUNTER_RUN_SCHEDULER=false)."""
    from service.db.engine import Database
    from service.jobs.hub import resolve_hub_access
    from service.launch import load_launcher
    from service.scheduler.loop import Scheduler
    from service.settings import Settings
    from service.sweeps.controller import SweepController

    _default_data_roots()
    settings = Settings()
    db = Database(settings.database_url)
    settings.hub_access = resolve_hub_access(settings.hub_access)  # the launcher's HF env
    launcher = load_launcher(settings.launcher, settings)
    sched = Scheduler(settings, db, launcher)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    sweeps = SweepController(settings, db, launcher)
    sched.start()
    sweeps.start()
    typer.echo("shunter: scheduler running; Ctrl-C stops it")
    try:
        done.wait()
    finally:
        sweeps.stop()
        sched.stop()
        launcher.close()
        db.dispose()


def doctor(
    probe_timeout: Annotated[float, typer.Option(help="Seconds to wait for the probe job.")] = 300,
    json_: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Check this deployment from the API's side: database, Ray, storage, GPUs, HF cache/Hub.

    Uses the server's settings (SHUNTER_*). With no SHUNTER_RAY_ADDRESS it starts (and stops)
    an embedded head, as `serve` would. Exit code 1 when a check fails.
    """
    import json

    from service.db.engine import Database
    from service.doctor import Outcome, run_checks
    from service.jobs.hub import resolve_hub_access
    from service.launch import load_launcher
    from service.settings import Settings

    _default_data_roots()
    settings = Settings()
    settings.hub_access = resolve_hub_access(settings.hub_access)
    db = Database(settings.database_url)
    launcher = None
    try:
        launcher = load_launcher(settings.launcher, settings)
        checks = run_checks(
            settings=settings, db=db, launcher=launcher, probe_timeout_s=probe_timeout
        )
    finally:
        if launcher is not None:
            launcher.close()
        db.dispose()
    if json_:
        typer.echo(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        for c in checks:
            typer.echo(f"[{c.outcome.value:>7}] {c.name}: {c.detail}")
            if c.fix:
                typer.echo(f"          fix: {c.fix}")
    if any(c.outcome is Outcome.FAIL for c in checks):
        raise typer.Exit(1)


def admin_sim(
    cluster: Annotated[Path, typer.Option(help='cluster.json: {"nodes": [{"gpus", "cpus"}]}')],
    teams: Annotated[Path, typer.Option(help='teams.json: {"team": {"weight", ...}}')],
    trace: Annotated[Path, typer.Option(help="trace.jsonl: one job a line")],
    out: Annotated[Path, typer.Option(help="Where to write the result JSON.")],
    policy: Annotated[
        list[str] | None, typer.Option(help="fair | fifo | priority; repeat to compare")
    ] = None,
    checkpoint_interval_s: Annotated[float, typer.Option(help="Work between checkpoints.")] = 600,
    tick_s: Annotated[float, typer.Option(help="Scheduler interval (virtual s).")] = 60,
    grace_s: Annotated[float, typer.Option(help="Fair-share preemption grace.")] = 600,
    min_runtime_s: Annotated[float, typer.Option(help="Run time before preemptible.")] = 300,
    half_life_s: Annotated[
        float, typer.Option(help="Half-life of what teams are owed and of usage history.")
    ] = 7 * 24 * 3600.0,
    eta_depth: Annotated[
        int,
        typer.Option(
            help="ETAs for the first N queued jobs in policy order, as live (deeper: taken "
            "later); 0 = every job's first ETA at its submit (slower on deep queues)."
        ),
    ] = 500,
) -> None:
    """Replay a trace through the live scheduling policy on a virtual clock."""
    import json

    from service.policy.planner import PolicyConfig
    from service.sim.engine import SimConfig, simulate
    from service.sim.trace import TraceError, load_cluster, load_teams, load_trace

    names = policy or ["fair"]
    try:
        nodes, team_map, jobs = load_cluster(cluster), load_teams(teams), load_trace(trace)
        cfgs = [
            SimConfig(
                policy=n,
                checkpoint_interval_s=checkpoint_interval_s,
                tick_s=tick_s,
                grace_s=grace_s,
                min_runtime_s=min_runtime_s,
                half_life_s=half_life_s,
                eta_depth=eta_depth or None,
            )
            for n in names
        ]
        for n in names:
            PolicyConfig.named(n)  # an unknown name fails here, before any replay
    except (TraceError, ValueError) as e:
        typer.echo(f"shunter admin sim: {e}", err=True)
        raise typer.Exit(2) from None
    results = {c.policy: simulate(nodes=nodes, teams=team_map, jobs=jobs, cfg=c) for c in cfgs}
    first = results[names[0]]
    body = {**first, "policies": results} if len(names) > 1 else first
    out.write_text(json.dumps(body, indent=1))
    for name, r in results.items():
        s = r["summary"]
        typer.echo(
            f"{name}: utilisation {s['utilisation']}, p95 wait {s['p95_wait_s']} s, "
            f"jain {s['jain_index']}, preemptions {s['preemptions']}, "
            f"ETA error median {s['eta_error_s']['median']} s"
        )
        c = s["eta"]
        typer.echo(
            f"  ETAs (jobs that waited >= {c['min_wait_s']:g} s: {c['jobs']}): "
            f"|actual - estimated| / actual wait median {c['median_rel_error']}, "
            f"p90 {c['p90_rel_error']}; p90 range coverage {c['p90_coverage']}"
        )
        for kind, t in (s.get("by_type") or {}).items():  # a mixed cluster (issue 30)
            per = ", ".join(f"{k} {v:g}" for k, v in t.get("team_gpu_s", {}).items())
            typer.echo(
                f"  {kind}: {t['gpus']:g} GPUs, {t['jobs']} jobs, {t['gpu_s']:g} GPU-s "
                f"({per or 'none'}), utilisation {t['utilisation_overall']}"
            )
        if s.get("share_basis"):  # the share error over the dominant shares per type
            errs = ", ".join(f"{k} {v['share_error']}" for k, v in s["teams"].items())
            typer.echo(f"  share error ({s['share_basis']}): {errs}")
        if s.get("rejected"):
            typer.echo(f"  rejected (no card holds the plan): {len(s['rejected'])} jobs")
    typer.echo(f"wrote {out}")


def admin_sim_trace(
    out: Annotated[Path, typer.Option(help="Where to write the trace (JSONL).")],
    teams: Annotated[str, typer.Option(help="Comma-separated team names.")] = "a,b,c",
    jobs: Annotated[int, typer.Option(help="Number of jobs.")] = 500,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    mean_interarrival_s: Annotated[float, typer.Option(help="Mean time between submits.")] = 120,
) -> None:
    """Write a synthetic Philly/Helios-shaped trace for ``shunter admin sim``."""
    import json

    from service.sim.trace import generate

    lines = generate(
        teams=[t for t in teams.split(",") if t],
        jobs=jobs,
        seed=seed,
        mean_interarrival_s=mean_interarrival_s,
    )
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    typer.echo(f"wrote {len(lines)} jobs to {out}")


def _missing_server(name: str) -> Callable[[], None]:
    def command() -> None:
        typer.echo(f"shunter {name} needs the server: pip install 'shunter[server]'", err=True)
        raise typer.Exit(2)

    command.__doc__ = f"({name}: needs pip install 'shunter[server]')"
    return command


def register(app: typer.Typer) -> None:
    """Add this module's commands to app (the ``shunter.cli`` entry point)."""
    from shunter.cli.admin import admin_app

    # The simulator is pure policy code: it needs no server dependencies.
    admin_app.command("sim")(admin_sim)
    admin_app.command("sim-trace")(admin_sim_trace)
    if (
        importlib.util.find_spec("fastapi") is None
        or importlib.util.find_spec("sqlalchemy") is None
    ):
        for name in ("serve", "scheduler", "db", "tensorboard", "doctor"):
            app.command(name)(_missing_server(name))
        return
    app.command("serve")(serve)
    app.command("tensorboard")(tensorboard)
    app.command("scheduler")(scheduler)
    app.command("doctor")(doctor)
    app.add_typer(db_app, name="db")
