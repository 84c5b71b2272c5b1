"""Migrations: upgrade head on an empty database, autogenerate finds no difference from the
models, downgrade to base leaves nothing, upgrade head again works. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from service.db.engine import make_engine
from service.db.migrate import downgrade, upgrade
from service.db.tables import Base


def _diff(url: str) -> list[Any]:
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = make_engine(url, pool_size=1)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_matches_models_then_down_and_up(empty_db_url: str) -> None:
    db_url = empty_db_url
    upgrade(db_url)
    assert _tables(db_url) == set(Base.metadata.tables)
    assert _diff(db_url) == []
    downgrade(db_url, "base")
    assert _tables(db_url) == set()
    upgrade(db_url)
    assert _diff(db_url) == []


def test_partial_unique_index_exists_after_migration(empty_db_url: str) -> None:
    db_url = empty_db_url
    upgrade(db_url)
    engine = make_engine(db_url, pool_size=1)
    try:
        idx = {i["name"]: i for i in sa.inspect(engine).get_indexes("attempts")}
        assert idx["uq_attempts_one_active"]["unique"]
    finally:
        engine.dispose()
