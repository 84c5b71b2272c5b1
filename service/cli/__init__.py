"""The ``shunter`` command line.

Server-side commands (serve, db, scheduler, ray-status) live in ``service.cli.server``; the
user-side commands (submit, jobs, watch, validate, admin, ...) in ``service.cli.user``. Both
register themselves on the one Typer app here.
"""

from __future__ import annotations

import typer

from service.cli import server, user

__all__ = ["app", "main"]

app = typer.Typer(
    name="shunter", help="Shunter: training jobs on a shared cluster.", no_args_is_help=True
)
server.register(app)
user.register(app)


def main() -> None:
    app()
