"""Database-clock expressions: ``utcnow()`` and ``utcnow_plus(seconds)``.

Leases must be judged on ONE clock, the database's, never the API host's or the driver's.
Rendered per dialect:

- PostgreSQL: ``now()`` / ``now() + make_interval(secs => s)`` (timestamptz; transaction time).
- SQLite: ``strftime('%Y-%m-%d %H:%M:%f', 'now', ...) || '000'`` — the exact text format
  SQLAlchemy stores for ``DateTime`` on SQLite (microseconds), so string comparison with
  Python-written values orders correctly.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

from sqlalchemy import DateTime
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

__all__ = ["as_utc", "utcnow", "utcnow_plus"]


@overload
def as_utc(t: datetime) -> datetime: ...
@overload
def as_utc(t: None) -> None: ...
@overload
def as_utc(t: datetime | None) -> datetime | None: ...
def as_utc(t: datetime | None) -> datetime | None:
    """A time read back from the database as an aware UTC one: SQLite returns naive
    datetimes, and they are UTC (``service.db.tables``). None stays None."""
    if t is None or t.tzinfo is not None:
        return t
    return t.replace(tzinfo=UTC)


class utcnow(FunctionElement[Any]):
    """The database's current UTC time."""

    type = DateTime(timezone=True)
    inherit_cache = True


class utcnow_plus(FunctionElement[Any]):
    """The database's current UTC time plus a number of seconds (a bound float)."""

    type = DateTime(timezone=True)
    inherit_cache = True


@compiles(utcnow)
def _utcnow_default(element: utcnow, compiler: Any, **kw: Any) -> str:
    return "now()"


@compiles(utcnow, "sqlite")
def _utcnow_sqlite(element: utcnow, compiler: Any, **kw: Any) -> str:
    return "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"


@compiles(utcnow_plus)
def _utcnow_plus_default(element: utcnow_plus, compiler: Any, **kw: Any) -> str:
    secs = compiler.process(element.clauses, **kw)
    return f"(now() + make_interval(secs => CAST({secs} AS double precision)))"


@compiles(utcnow_plus, "sqlite")
def _utcnow_plus_sqlite(element: utcnow_plus, compiler: Any, **kw: Any) -> str:
    secs = compiler.process(element.clauses, **kw)
    return f"(strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', {secs})) || '000')"
