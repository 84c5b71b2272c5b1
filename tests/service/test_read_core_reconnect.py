"""The hot read path (``Database.read_core``) on PostgreSQL has no pre-ping: a pooled
connection the server dropped fails once, SQLAlchemy invalidates the pool, and the read is
run again on a fresh connection instead of failing the poll."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from service.db.engine import Database


def test_a_dropped_connection_is_read_again(pg_schema_url: str) -> None:
    db = Database(pg_schema_url)
    try:
        pid = db.read_core(lambda c: c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
        admin = sa.create_engine(pg_schema_url)
        with admin.begin() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
        admin.dispose()
        again = db.read_core(lambda c: c.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
        assert again != pid
    finally:
        db.dispose()


def test_other_errors_are_not_retried(pg_schema_url: str) -> None:
    db = Database(pg_schema_url)
    calls = []

    def bad(c: sa.Connection) -> None:
        calls.append(1)
        c.execute(sa.text("SELECT * FROM no_such_table"))

    try:
        with pytest.raises(sa.exc.ProgrammingError):
            db.read_core(bad)
        assert len(calls) == 1
    finally:
        db.dispose()
