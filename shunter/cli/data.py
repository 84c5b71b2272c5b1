"""``shunter data ...`` and ``shunter models ...``: the team's datasets and base models.

``push`` uploads a file or a folder (the server checks it before storing it: a dataset's
format, columns, rows and a sample; a model folder's config, weights and tokenizer) and
prints the id a spec names (``data.train: {dataset: ds-...}``, ``model.name_or_path:
mdl-...``). ``rm`` hides it; jobs that used it keep its bytes until they are deleted.
Exit codes as the job commands (``shunter.cli.jobs``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from shunter.cli.common import JsonOpt, TokenOpt, UrlOpt, api, dump, merge_opts, out, print_json
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
    table = Table(title=title, title_justify="left")
    table.add_column("ID", no_wrap=True)
    for col in ("NAME", "FORMAT", "ROWS", "COLUMNS", "SIZE"):
        table.add_column(col)
    for o in objs:
        rows = "-" if o.rows is None else str(o.rows)
        table.add_row(
            o.id, escape(o.name), o.format, rows, escape(", ".join(o.columns)), _size(o.bytes)
        )
    return table


def _show(o: StoredObject) -> None:
    out.print(f"{o.id}  {escape(o.name)}  ({o.kind}, {o.format}, {_size(o.bytes)})")
    out.print(f"digest  {o.digest}")
    if o.rows is not None:
        out.print(f"rows    {o.rows}")
    if o.columns:
        out.print(f"columns {escape(', '.join(o.columns))}")
    out.print(f"files   {escape(', '.join(o.files[:8]))}" + (" ..." if len(o.files) > 8 else ""))
    for row in o.sample:
        out.print(escape(json.dumps(row, ensure_ascii=False)[:200]))


def _commands(app: typer.Typer, kind: str) -> None:
    @app.command("push")
    def push(
        path: PathArg,
        name: NameOpt = None,
        url: UrlOpt = None,
        token: TokenOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Upload and check it; prints the id a spec names."""
        opts = merge_opts(url, token, json_)
        with api(opts) as client:
            push_fn = client.push_dataset if kind == "dataset" else client.push_model
            obj = push_fn(path, name=name)
        print_json(dump(obj)) if opts.json else _show(obj)

    @app.command("ls")
    def ls(url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False) -> None:
        """Your team's, newest first."""
        opts = merge_opts(url, token, json_)
        with api(opts) as client:
            objs = client.datasets() if kind == "dataset" else client.uploaded_models()
        title = "Datasets" if kind == "dataset" else "Base models"
        print_json(dump(objs)) if opts.json else out.print(objects_table(title, objs))

    @app.command("show")
    def show(
        object_id: IdArg,
        url: UrlOpt = None,
        token: TokenOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Format, columns, rows, files and a sample."""
        opts = merge_opts(url, token, json_)
        with api(opts) as client:
            obj = (
                client.dataset(object_id) if kind == "dataset" else client.uploaded_model(object_id)
            )
        print_json(dump(obj)) if opts.json else _show(obj)

    @app.command("rm")
    def rm(
        object_id: IdArg,
        url: UrlOpt = None,
        token: TokenOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Remove it (jobs that used it keep its bytes until they are deleted)."""
        opts = merge_opts(url, token, json_)
        with api(opts) as client:
            if kind == "dataset":
                client.delete_dataset(object_id)
            else:
                client.delete_model(object_id)
        print_json({"id": object_id, "deleted": True}) if opts.json else out.print(
            f"{object_id} removed"
        )


_commands(data_app, "dataset")
_commands(models_app, "model")
