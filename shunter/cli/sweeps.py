"""``shunter sweep ...``: submit, show, watch, cancel and list hyperparameter sweeps.

A sweep's trials are ordinary jobs: ``shunter show <job id>``, ``logs``, ``download`` work on
each; ``shunter download <best trial's job id>`` fetches the best model. Exit codes as the job
commands (``shunter.cli.jobs``); ``watch`` exits 1 when the sweep failed or was cancelled.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.table import Table

from shunter.cli.common import (
    EXIT,
    Opts,
    SetOpt,
    api,
    common_options,
    dump,
    emit,
    fail_validation,
    grid,
    out,
    print_json,
    read_spec,
)
from shunter.client import Client
from shunter.client.responses import Sweep
from shunter.jobspec.errors import format_spec_errors
from shunter.jobspec.sweep import check_sweep

__all__ = ["sweep_app", "sweep_table"]

sweep_app = typer.Typer(help="Hyperparameter sweeps (trials are jobs).", no_args_is_help=True)
SweepArg = Annotated[str, typer.Argument(help="Sweep id.")]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _params(params: dict[str, object]) -> str:
    return ", ".join(
        f"{k.rsplit('.', 1)[-1]}={v:.3g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]}={v}"
        for k, v in params.items()
    )


def sweep_table(sweep: Sweep) -> Table:
    """The sweep's trials, the best one marked with *."""
    best = sweep.best_trial.number if sweep.best_trial else None
    title = (
        f"sweep {sweep.id} ({sweep.name}): {sweep.status}, {sweep.objective} "
        f"{sweep.direction}, {len(sweep.trials)}/{sweep.max_trials} trials"
        + (f" - {sweep.message}" if sweep.message else "")
    )
    rows = (
        (
            f"{t.number}{'*' if t.number == best else ''}",
            t.job_id,
            t.status,
            _params(t.params),
            _fmt(t.objective),
            f"{_fmt(t.best_value)} ({t.best_step if t.best_step is not None else '-'})",
            "-" if t.pruned_at_step is None else str(t.pruned_at_step),
        )
        for t in sweep.trials
    )
    columns = ("#", "JOB", "STATUS", "PARAMS", "OBJECTIVE", "BEST (STEP)", "PRUNED AT")
    return grid(title, columns, rows)


def _details(sweep: Sweep) -> RenderableType:
    """The trials' table, then the best trial and how to fetch its model."""
    b = sweep.best_trial
    if b is None:
        return sweep_table(sweep)
    return Group(
        sweep_table(sweep),
        f"best: trial {b.number} ({_params(b.params)}) {sweep.objective} = {_fmt(b.objective)};"
        f" model: shunter download {b.job_id}",
    )


def _show(sweep: Sweep, as_json: bool) -> None:
    print_json(dump(sweep)) if as_json else out.print(_details(sweep))


@sweep_app.command("submit")
@common_options
def submit(
    opts: Opts,
    path: Annotated[Path, typer.Argument(help="Sweep file (YAML or JSON).")],
    set_: SetOpt = None,
    watch: Annotated[bool, typer.Option("--watch", help="Follow it until it ends.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between polls with --watch.")] = 5.0,
) -> None:
    """Submit a sweep. Its body is checked here first (the server checks it again, and every
    corner of the space as a trial spec)."""
    document = read_spec(opts, path, set_)
    _, errors = check_sweep(document)
    if errors:
        body = format_spec_errors(errors)
        fail_validation(opts, body["detail"], body["message"])
    with api(opts) as client:
        sweep = client.submit_sweep(document)
        if not watch:
            _show(sweep, opts.json) if opts.json else out.print(f"submitted sweep {sweep.id}")
            return
        sweep = _follow(client, sweep.id, poll, opts.json)
    if sweep.status != "succeeded":
        raise typer.Exit(EXIT["job_failed"])


def _follow(client: Client, sweep_id: str, poll: float, as_json: bool) -> Sweep:
    last = ""
    while True:
        sweep = client.sweep(sweep_id)
        if not as_json:
            line = f"{sweep.status}: {sweep.counts} {sweep.message}"
            if line != last:
                out.print(line)
                last = line
        if sweep.terminal:
            _show(sweep, as_json)
            return sweep
        time.sleep(poll)


@sweep_app.command("show")
@common_options
def show(opts: Opts, sweep_id: SweepArg) -> None:
    """The sweep's trials (params, status, objective, best step) and its best trial."""
    emit(opts, lambda client: client.sweep(sweep_id), _details)


@sweep_app.command("watch")
@common_options
def watch(
    opts: Opts,
    sweep_id: SweepArg,
    poll: Annotated[float, typer.Option(help="Seconds between polls.")] = 5.0,
) -> None:
    """Follow a sweep until it ends; exit 1 unless it succeeded."""
    with api(opts) as client:
        sweep = _follow(client, sweep_id, poll, opts.json)
    if sweep.status != "succeeded":
        raise typer.Exit(EXIT["job_failed"])


@sweep_app.command("cancel")
@common_options
def cancel(opts: Opts, sweep_id: SweepArg) -> None:
    """Stop sampling and cancel every unfinished trial."""
    emit(opts, lambda client: client.cancel_sweep(sweep_id), lambda s: f"sweep {s.id}: {s.status}")


@sweep_app.command("list")
@common_options
def list_(opts: Opts) -> None:
    """Your team's sweeps, newest first."""
    emit(opts, lambda client: client.sweeps(), _sweeps_table)


def _sweeps_table(sweeps: list[Sweep]) -> Table:
    rows = (
        (
            s.id,
            s.name,
            s.status,
            f"{sum(s.counts.values())}/{s.max_trials}",
            s.objective,
            f"#{s.best_trial.number} {_fmt(s.best_trial.objective)}" if s.best_trial else "-",
        )
        for s in sweeps
    )
    return grid("Sweeps", ("ID", "NAME", "STATUS", "TRIALS", "OBJECTIVE", "BEST"), rows)
