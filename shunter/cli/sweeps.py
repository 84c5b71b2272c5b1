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
from rich.table import Table

from shunter.cli.common import (
    EXIT,
    JsonOpt,
    SetOpt,
    TokenOpt,
    UrlOpt,
    api,
    dump,
    fail_validation,
    merge_opts,
    out,
    print_json,
    read_spec,
)
from shunter.client import Client
from shunter.client.models import Sweep
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
    table = Table(title=title, title_justify="left")
    for col in ("#", "JOB", "STATUS", "PARAMS", "OBJECTIVE", "BEST (STEP)", "PRUNED AT"):
        table.add_column(col)
    for t in sweep.trials:
        mark = "*" if t.number == best else ""
        table.add_row(
            f"{t.number}{mark}",
            t.job_id,
            t.status,
            _params(t.params),
            _fmt(t.objective),
            f"{_fmt(t.best_value)} ({t.best_step if t.best_step is not None else '-'})",
            "-" if t.pruned_at_step is None else str(t.pruned_at_step),
        )
    return table


def _show(sweep: Sweep, as_json: bool) -> None:
    if as_json:
        print_json(dump(sweep))
        return
    out.print(sweep_table(sweep))
    if sweep.best_trial is not None:
        b = sweep.best_trial
        out.print(
            f"best: trial {b.number} ({_params(b.params)}) {sweep.objective} = {_fmt(b.objective)};"
            f" model: shunter download {b.job_id}"
        )


@sweep_app.command("submit")
def submit(
    path: Annotated[Path, typer.Argument(help="Sweep file (YAML or JSON).")],
    set_: SetOpt = None,
    watch: Annotated[bool, typer.Option("--watch", help="Follow it until it ends.")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between polls with --watch.")] = 5.0,
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Submit a sweep. Its body is checked here first (the server checks it again, and every
    corner of the space as a trial spec)."""
    opts = merge_opts(url, token, json_)
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
def show(
    sweep_id: SweepArg, url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False
) -> None:
    """The sweep's trials (params, status, objective, best step) and its best trial."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        sweep = client.sweep(sweep_id)
    _show(sweep, opts.json)


@sweep_app.command("watch")
def watch(
    sweep_id: SweepArg,
    poll: Annotated[float, typer.Option(help="Seconds between polls.")] = 5.0,
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Follow a sweep until it ends; exit 1 unless it succeeded."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        sweep = _follow(client, sweep_id, poll, opts.json)
    if sweep.status != "succeeded":
        raise typer.Exit(EXIT["job_failed"])


@sweep_app.command("cancel")
def cancel(
    sweep_id: SweepArg, url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False
) -> None:
    """Stop sampling and cancel every unfinished trial."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        sweep = client.cancel_sweep(sweep_id)
    _show(sweep, opts.json) if opts.json else out.print(f"sweep {sweep.id}: {sweep.status}")


@sweep_app.command("list")
def list_(url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False) -> None:
    """Your team's sweeps, newest first."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        sweeps = client.sweeps()
    if opts.json:
        print_json(dump(sweeps))
        return
    table = Table(title="Sweeps", title_justify="left")
    for col in ("ID", "NAME", "STATUS", "TRIALS", "OBJECTIVE", "BEST"):
        table.add_column(col)
    for s in sweeps:
        best = f"#{s.best_trial.number} {_fmt(s.best_trial.objective)}" if s.best_trial else "-"
        n = sum(s.counts.values())
        table.add_row(s.id, s.name, s.status, f"{n}/{s.max_trials}", s.objective, best)
    out.print(table)
