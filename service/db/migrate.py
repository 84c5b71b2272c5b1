"""Run Alembic migrations programmatically (``shunter db upgrade``, embedded start-up).

The Alembic config is built in code, pointing at the repository's ``migrations/`` folder, so it
works from any working directory; ``service/alembic.ini`` is there for people who want the
``alembic`` command itself (``alembic -c service/alembic.ini ...``).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

__all__ = ["MIGRATIONS_DIR", "alembic_config", "downgrade", "upgrade"]

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
