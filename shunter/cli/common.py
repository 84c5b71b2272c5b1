"""Plumbing shared by the user-side CLI modules (``user.py``, ``user_admin.py``).

Common options (``--url``/``--token``/``--json``), output (Rich for humans, plain JSON for
scripts), the error → exit-code mapping, and reading a spec file with the server's parser.
Exit codes are documented in :mod:`shunter.cli.jobs`.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from shunter.cli.overrides import OverrideError, apply_overrides
from shunter.client import (
    AuthError,
    BadRequest,
    Client,
    NotFound,
    PermissionDenied,
    ShunterError,
    ValidationError,
)
from shunter.client.errors import APIError
from shunter.client.responses import Job

__all__ = [
    "EXIT",
    "JobArg",
    "JsonOpt",
    "Opts",
    "SetOpt",
    "TokenOpt",
    "UrlOpt",
    "api",
    "common_options",
    "dump",
    "emit",
    "err",
    "fail",
    "fail_invalid",
    "fail_validation",
    "grid",
    "job_exit",
    "merge_opts",
    "out",
    "print_json",
    "read_spec",
    "reply",
    "set_root_opts",
    "spec_error_lines",
]

EXIT = {"ok": 0, "job_failed": 1, "invalid": 2, "auth": 3, "not_found": 4, "error": 5}

UrlOpt = Annotated[str | None, typer.Option("--url", help="API URL (env SHUNTER_URL).")]
TokenOpt = Annotated[str | None, typer.Option("--token", help="API token (env SHUNTER_TOKEN).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
JobArg = Annotated[str, typer.Argument(help="Job id.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a spec field: dotted.path=yaml-value (repeatable)."),
]


@dataclass(kw_only=True)
class Opts:
    """The common options of one invocation, merged from root and command level."""

    url: str | None = None
    token: str | None = None
    json: bool = False


# Root-level options of the current invocation (``shunter --json jobs``), set by the root
# callback that ``register`` installs. Module state is enough: one CLI run is one invocation,
# and the callback runs (and resets it) at the start of every invocation.
ROOT = Opts()


def set_root_opts(opts: Opts) -> None:
    global ROOT
    ROOT = opts


def merge_opts(url: str | None, token: str | None, as_json: bool) -> Opts:
    """Command-level options win over root-level ones."""
    return Opts(url=url or ROOT.url, token=token or ROOT.token, json=as_json or ROOT.json)


def common_options(fn: Callable[..., None]) -> Callable[..., None]:
    """Give a command the common ``--url``/``--token``/``--json`` options, declared here once.

    ``fn`` takes the merged :class:`Opts` as its first parameter; the command Typer sees has
    ``fn``'s other parameters followed by the three options, and calls ``fn`` with them merged.
    """
    params = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]
    common = [
        inspect.Parameter("url", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=UrlOpt),
        inspect.Parameter(
            "token", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=TokenOpt
        ),
        inspect.Parameter(
            "json_", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=JsonOpt
        ),
    ]

    @functools.wraps(fn)
    def command(
        *args: Any,
        url: str | None = None,
        token: str | None = None,
        json_: bool = False,
        **kwargs: Any,
    ) -> None:
        fn(merge_opts(url, token, json_), *args, **kwargs)

    sig = inspect.Signature([*params, *common], return_annotation=None)
    command.__signature__ = sig  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()}
    return command


out = Console()
err = Console(stderr=True, soft_wrap=True)


def print_json(data: Any) -> None:
    # Plain print, not Rich: scripts need exact JSON without wrapping or markup.
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def dump(model: Any) -> Any:
    if isinstance(model, list):
        return [dump(m) for m in model]
    return model.model_dump(mode="json") if hasattr(model, "model_dump") else model


def fail(opts: Opts, code: int, message: str, extra: dict[str, Any] | None = None) -> NoReturn:
    if opts.json:
        sys.stderr.write(json.dumps({"error": {"message": message, **(extra or {})}}) + "\n")
    else:
        err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)


def fail_invalid(opts: Opts, message: str, detail: Any) -> NoReturn:
    """A document or request the API refuses to read (400-style): exit 2 with its message."""
    if opts.json:
        sys.stderr.write(json.dumps({"error": {"message": message, "detail": detail}}) + "\n")
    else:
        err.print(f"[bold red]invalid:[/] {escape(message)}", highlight=False)
    raise typer.Exit(EXIT["invalid"])


def fail_validation(opts: Opts, detail: list[dict[str, Any]], message: str) -> NoReturn:
    if opts.json:
        sys.stderr.write(json.dumps({"error": {"message": message, "detail": detail}}) + "\n")
    else:
        err.print("[bold red]invalid spec:[/]", highlight=False)
        for line in spec_error_lines(detail):
            err.print(f"  {line}", highlight=False, markup=False)
    raise typer.Exit(EXIT["invalid"])


def spec_error_lines(detail: list[Any]) -> list[str]:
    """``loc: msg`` per problem; the same text for local and server validation."""
    lines = []
    for d in detail:
        if isinstance(d, dict):
            loc = d.get("loc")
            loc = ".".join(str(p) for p in loc) if isinstance(loc, list) else loc
            lines.append(f"{loc}: {d.get('msg')}" if loc else str(d.get("msg")))
        else:
            lines.append(str(d))
    return lines


@contextmanager
def api(opts: Opts) -> Iterator[Client]:
    """A client for this command; API errors become messages and exit codes."""
    try:
        with Client(opts.url, opts.token) as client:
            yield client
    except ValidationError as e:
        if not e.detail:  # not a spec's field list: an upload's file, named in the message
            fail_invalid(
                opts, e.message, e.body.get("detail") if isinstance(e.body, dict) else None
            )
        fail_validation(opts, e.detail, e.message)
    except BadRequest as e:
        detail = e.body.get("detail") if isinstance(e.body, dict) else None
        fail_invalid(opts, e.message, detail)
    except (AuthError, PermissionDenied) as e:
        fail(opts, EXIT["auth"], str(e), {"status": e.status_code})
    except NotFound as e:
        fail(opts, EXIT["not_found"], str(e), {"status": e.status_code})
    except APIError as e:
        fail(opts, EXIT["error"], str(e), {"status": e.status_code})
    except (ShunterError, TimeoutError) as e:
        fail(opts, EXIT["error"], str(e))


def job_exit(job: Job) -> None:
    if job.status in ("failed", "cancelled"):
        raise typer.Exit(EXIT["job_failed"])


def read_spec(opts: Opts, path: Path, sets: list[str] | None) -> dict[str, Any]:
    """Parse a spec file with the server's own body parser, then apply ``--set`` overrides.

    Using ``shunter.jobspec.parse.parse_body`` (not plain ``yaml.safe_load``) means a file the
    server would refuse (NaN, NUL, duplicate keys, anchors, ...) is refused here with the
    same message, and a file it reads is read the same way.
    """
    from shunter.jobspec.parse import BodyError, parse_body

    try:
        raw = path.read_bytes()
    except OSError as e:
        fail(opts, EXIT["invalid"], f"{path}: {e.strerror or e}")
    try:
        data = parse_body(raw, _media_type(path))
    except BodyError as e:
        fail_invalid(opts, f"body: {e.message}", "bad_body")  # the server's wording
    try:
        return apply_overrides(data, sets or [])
    except OverrideError as e:
        fail(opts, EXIT["invalid"], str(e))


def _media_type(path: Path) -> str:
    return "application/json" if path.suffix.lower() == ".json" else "application/yaml"


def reply(opts: Opts, value: Any, render: Callable[[Any], Any]) -> None:
    """A command's answer: ``value`` as JSON (``--json``), else what ``render`` makes of it."""
    print_json(dump(value)) if opts.json else out.print(render(value))


def emit(opts: Opts, fetch: Callable[[Client], Any], render: Callable[[Any], Any]) -> None:
    """One read command's body: fetch with a client, then :func:`reply` with what came."""
    with api(opts) as client:
        value = fetch(client)
    reply(opts, value, render)


def grid(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], *, keep_first: bool = False
) -> Table:
    """A left-titled table; ``keep_first``: the first column (an id a command takes) never
    wraps."""
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, no_wrap=True) if keep_first and i == 0 else table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table
