"""``shunter data ...`` and ``shunter models ...``: the team's datasets and base models.

``push`` uploads a file or a folder (the server checks it before storing it: a dataset's
format, columns, rows and a sample; a model folder's config, weights and tokenizer) and
prints the id a spec names (``data.train: {dataset: ds-...}``, ``model.name_or_path:
mdl-...``). ``rm`` hides it; jobs that used it keep its bytes until they are deleted.
Exit codes as the job commands (``shunter.cli.jobs``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from shunter.cli.common import Opts, api, common_options, emit, grid, reply
from shunter.client import Client
from shunter.client.objects import StoredObject

__all__ = ["data_app", "models_app"]

data_app = typer.Typer(help="Datasets in the store (ds-...).", no_args_is_help=True)
models_app = typer.Typer(help="Base models in the store (mdl-...).", no_args_is_help=True)
NameOpt = Annotated[str | None, typer.Option("--name", help="A name (default: the file's).")]
PathArg = Annotated[
    Path, typer.Argument(help="A dataset file or folder; for models, an HF-layout folder.")
]
IdArg = Annotated[str, typer.Argument(help="Its id (ds-... or mdl-...).")]


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def objects_table(title: str, objs: list[StoredObject]) -> Table:
    rows = (
        (
            o.id,
            escape(o.name),
            o.format,
            "-" if o.rows is None else str(o.rows),
            escape(", ".join(o.columns)),
            _size(o.bytes),
        )
        for o in objs
    )
    columns = ("ID", "NAME", "FORMAT", "ROWS", "COLUMNS", "SIZE")
    return grid(title, columns, rows, keep_first=True)


def _details(o: StoredObject) -> str:
    lines = [f"{o.id}  {escape(o.name)}  ({o.kind}, {o.format}, {_size(o.bytes)})"]
    lines.append(f"digest  {o.digest}")
    if o.rows is not None:
        lines.append(f"rows    {o.rows}")
    if o.columns:
        lines.append(f"columns {escape(', '.join(o.columns))}")
    lines.append(f"files   {escape(', '.join(o.files[:8]))}" + (" ..." if len(o.files) > 8 else ""))
    lines += (escape(json.dumps(row, ensure_ascii=False)[:200]) for row in o.sample)
    return "\n".join(lines)


@dataclass(frozen=True)
class _Kind:
    """What the commands call for one kind of stored object."""

    title: str
    push: Callable[[Client, Path, str | None], StoredObject]
    listing: Callable[[Client], list[StoredObject]]
    get: Callable[[Client, str], StoredObject]
    delete: Callable[[Client, str], object]


_KINDS = {
    "dataset": _Kind(
        "Datasets",
        lambda c, path, name: c.push_dataset(path, name=name),
        lambda c: c.datasets(),
        lambda c, object_id: c.dataset(object_id),
        lambda c, object_id: c.delete_dataset(object_id),
    ),
    "model": _Kind(
        "Base models",
        lambda c, path, name: c.push_model(path, name=name),
        lambda c: c.uploaded_models(),
        lambda c, object_id: c.uploaded_model(object_id),
        lambda c, object_id: c.delete_model(object_id),
    ),
}


def _commands(app: typer.Typer, kind: _Kind) -> None:
    @app.command("push")
    @common_options
    def push(opts: Opts, path: PathArg, name: NameOpt = None) -> None:
        """Upload and check it; prints the id a spec names."""
        emit(opts, lambda client: kind.push(client, path, name), _details)

    @app.command("ls")
    @common_options
    def ls(opts: Opts) -> None:
        """Your team's, newest first."""
        emit(opts, kind.listing, lambda objs: objects_table(kind.title, objs))

    @app.command("show")
    @common_options
    def show(opts: Opts, object_id: IdArg) -> None:
        """Format, columns, rows, files and a sample."""
        emit(opts, lambda client: kind.get(client, object_id), _details)

    @app.command("rm")
    @common_options
    def rm(opts: Opts, object_id: IdArg) -> None:
        """Remove it (jobs that used it keep its bytes until they are deleted)."""
        with api(opts) as client:
            kind.delete(client, object_id)
        reply(opts, {"id": object_id, "deleted": True}, lambda _: f"{object_id} removed")


_commands(data_app, _KINDS["dataset"])
_commands(models_app, _KINDS["model"])
