"""Per-team data roots: an admin adds a directory that one team's specs may read, beside the
global ``SHUNTER_DATA_ROOTS`` every team may read.

``add_root`` stores the directory's real path (symlinks followed; it must exist and be a
directory, else 422); ``roots_for(session, team=...)`` is what admission adds to the global
roots for that team's submits. Members see their own team's roots; admins any team's.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_admin
from service.db.engine import Database
from service.db.tables import Team, TeamDataRoot
from service.errors import NotFound, Unprocessable

__all__ = ["add_root", "list_roots", "remove_root", "roots_for"]


def roots_for(session: Session, *, team: str) -> list[Path]:
    rows = session.execute(
        select(TeamDataRoot.path).where(TeamDataRoot.team == team).order_by(TeamDataRoot.path)
    ).scalars()
    return [Path(p) for p in rows]


def list_roots(session: Session, *, principal: Principal, team: str) -> list[str]:
    if not principal.sees_team(team) or session.get(Team, team) is None:
        raise NotFound(f"team {team!r} not found")
    return [str(p) for p in roots_for(session, team=team)]


def add_root(db: Database, *, principal: Principal, team: str, path: str) -> list[str]:
    """Admin: let ``team`` read ``path`` (absolute, an existing directory)."""
    require_admin(principal)
    if not os.path.isabs(path):
        raise Unprocessable("path: must be absolute", detail="bad_path")
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise Unprocessable(f"path: {path!r} is not a directory on the server", detail="bad_path")

    def write(session: Session) -> list[str]:
        if session.get(Team, team) is None:
            raise NotFound(f"team {team!r} not found")
        if session.get(TeamDataRoot, (team, real)) is None:
            session.add(TeamDataRoot(team=team, path=real, created_by=principal.name))
            session.flush()
        return [str(p) for p in roots_for(session, team=team)]

    return db.write(write)


def remove_root(db: Database, *, principal: Principal, team: str, path: str) -> list[str]:
    require_admin(principal)

    def write(session: Session) -> list[str]:
        gone = session.execute(
            delete(TeamDataRoot).where(
                TeamDataRoot.team == team, TeamDataRoot.path == os.path.realpath(path)
            )
        )
        if gone.rowcount == 0:  # type: ignore[attr-defined]
            raise NotFound(f"team {team!r} has no data root {path!r}")
        return [str(p) for p in roots_for(session, team=team)]

    return db.write(write)
