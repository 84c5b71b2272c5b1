"""The ``shunter`` command line.

The user-side commands (submit, jobs, watch, validate, admin, ...) live in ``shunter.cli.jobs``
and need only the light install. Server-side commands (serve, db, scheduler) live in
``service.cli`` and arrive through the ``shunter.cli`` entry-point group, never an import, so
``pip install shunter`` without ``[server]`` still gives a working CLI.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from shunter.cli import jobs

__all__ = ["app", "main"]

app = typer.Typer(
    name="shunter", help="Shunter: training jobs on a shared cluster.", no_args_is_help=True
)
jobs.register(app)
for _ep in entry_points(group="shunter.cli"):
    _ep.load()(app)


def main() -> None:
    app()
