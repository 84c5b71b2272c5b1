"""Run Alembic migrations programmatically (``shunter db upgrade``, embedded start-up).

The Alembic config is built in code, pointing at the repository's ``migrations/`` folder, so it
works from any working directory; ``service/alembic.ini`` is there for people who want the
``alembic`` command itself (``alembic -c service/alembic.ini ...``).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

__all__ = ["MIGRATIONS_DIR", "alembic_config", "downgrade", "revisions", "upgrade"]

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation: a literal % in a URL (an escaped password) must be doubled.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def revisions(engine: Engine) -> tuple[set[str], set[str]]:
    """(the database's current revisions, the code's head revisions): migrated when equal."""
    script = ScriptDirectory.from_config(alembic_config(engine.url.render_as_string(False)))
    heads = set(script.get_heads())
    with engine.connect() as conn:
        current = set(MigrationContext.configure(conn).get_current_heads())
    return current, heads
