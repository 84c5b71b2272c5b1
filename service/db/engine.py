"""Engine and transaction runner.

``Database.write(fn)`` runs ``fn(session)`` in one write transaction and commits; on SQLite
that transaction starts with ``BEGIN IMMEDIATE`` so concurrent writers queue on the busy
timeout instead of failing mid-transaction, and a residual "database is locked" (or a
PostgreSQL serialization failure / deadlock) re-runs ``fn`` from the start — ``fn`` must
therefore be a pure function of the database. ``Database.read(fn)`` runs a read-only
transaction (plain deferred ``BEGIN``: WAL readers never block writers).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["Database", "is_retryable", "is_unavailable", "make_engine"]

T = TypeVar("T")

_WRITE_OPTION = "shunter_write"
_SINGLE_OPTION = "shunter_single_statement"
_SQLITE_BUSY_MS = 20_000
_RETRIES = 8
# PostgreSQL away (restarted, failed over, unreachable) must never hang a request: a new
# connection gives up after CONNECT_TIMEOUT_S, an established one whose peer went silent
# after TCP_USER_TIMEOUT_MS unacknowledged (keepalives probe an idle one), a statement after
# STATEMENT_TIMEOUT_MS, and a request waiting for a pooled connection after POOL_TIMEOUT_S.
# Each failure is an error the HTTP edge answers with 503 + Retry-After (``is_unavailable``).
CONNECT_TIMEOUT_S = 5
TCP_USER_TIMEOUT_MS = 10_000
STATEMENT_TIMEOUT_MS = 60_000
POOL_TIMEOUT_S = 10.0


def make_engine(url: str, *, pool_size: int = 20) -> Engine:
    """An engine for ``sqlite:///...`` (WAL, busy timeout, FKs) or ``postgresql+psycopg://``."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": _SQLITE_BUSY_MS / 1000},
            pool_size=pool_size,
            max_overflow=pool_size,
        )
        _configure_sqlite(engine)
        return engine
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,  # a connection the server dropped (restart) is replaced, not used
        pool_timeout=POOL_TIMEOUT_S,
        connect_args=_pg_utc(url),
    )


def _pg_utc(url: str) -> dict[str, Any]:
    """PostgreSQL connection options with the session time zone UTC, whatever the server's
    default: times come back as ``datetime.timezone.utc`` (the store is UTC; psycopg would
    otherwise attach a ``ZoneInfo`` of the server's zone, slower in every comparison and
    ``timestamp()`` of the hot paths). Keeps the URL's own ``options`` (a search_path) and
    its own ``connect_timeout`` etc.; adds the bounds above (libpq parameters) where absent."""
    query = make_url(url).query
    options = query.get("options")
    if isinstance(options, tuple):
        options = " ".join(options)
    ours = f"-c TimeZone=UTC -c statement_timeout={STATEMENT_TIMEOUT_MS}"
    args: dict[str, Any] = {"options": f"{options} {ours}" if options else ours}
    bounds = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }
    args.update({k: v for k, v in bounds.items() if k not in query})
    return args


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Driver autocommit: we emit BEGIN ourselves (pysqlite's implicit BEGIN is deferred
        # and would make a writer fail with SQLITE_BUSY instead of waiting).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_MS}")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")  # durable in WAL except on power loss
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        options = conn.get_execution_options()
        if options.get(_SINGLE_OPTION, False):
            return  # one statement: SQLite's own implicit read transaction is enough
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(_WRITE_OPTION, False) else "BEGIN")


def is_retryable(exc: BaseException) -> bool:
    """SQLite lock contention, or a PostgreSQL serialization failure / deadlock."""
    if not isinstance(exc, OperationalError):
        return False
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    if "database is locked" in text or "database is busy" in text:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    return sqlstate in {"40001", "40P01"}


# SQLSTATE classes/codes of a server that is away or going away: connection exceptions
# (08), admin shutdown / crash shutdown / cannot connect now (57P01-57P03), statement
# timeout or cancel (57014), and "too many connections" (53300).
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "57014", "53300"})


def is_unavailable(exc: BaseException) -> bool:
    """The database is away or overloaded, not wrong: a restart, a failover, an unreachable
    host, a bounded wait that ran out (connect, statement, pool). Such a request may be
    retried later (503 + Retry-After at the HTTP edge); lock contention is ``is_retryable``."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated or is_retryable(exc):
        return True
    if not hasattr(exc.orig, "sqlstate"):
        return False  # SQLite: only contention (above) is transient; the rest is a bug
    sqlstate: str | None = getattr(exc.orig, "sqlstate", None)
    if sqlstate is not None:
        return bool(sqlstate.startswith("08") or sqlstate in _UNAVAILABLE_STATES)
    # psycopg without a SQLSTATE: the client failed before the server answered (refused,
    # reset, timed out, closed mid-query).
    return isinstance(exc, OperationalError | InterfaceError)


class SqliteWriteLock:
    """One SQLite writer at a time across this machine's processes, waiting without polling.

    SQLite admits one writer; a writer that finds the lock taken sleeps in its busy handler
    (1 ms growing to 100 ms per retry) and may lose to newcomers again and again, so under
    concurrent submits a few wait seconds. Writers here queue on a thread lock and an
    ``flock`` on ``<db>.writelock`` instead, which wake the next waiter as soon as the
    holder is done. Re-entrant: a write inside a write takes it once."""

    def __init__(self, db_path: str | None) -> None:
        self._thread = threading.RLock()
        self._path = f"{db_path}.writelock" if db_path else None
        self._fd: int | None = None
        self._depth = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._thread:
            if self._depth == 0 and self._path is not None:
                if self._fd is None:
                    self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)


class Database:
    """Owns the engine and the two session factories (read, write)."""

    def __init__(self, url: str, *, pool_size: int = 20) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size=pool_size)
        write_engine = self.engine.execution_options(**{_WRITE_OPTION: True})
        self._single_engine = self.engine.execution_options(**{_SINGLE_OPTION: True})
        if not self.is_sqlite:
            # Hot single-statement reads (polls) on their own small pool: autocommit (no
            # BEGIN/ROLLBACK round trips) and no pre-ping (a third round trip); a connection
            # the server dropped is retried instead (read_core), which a read may always be.
            self._single_engine = create_engine(
                url,
                pool_size=4,
                max_overflow=pool_size,
                isolation_level="AUTOCOMMIT",
                connect_args=_pg_utc(url),
            ).execution_options(**{_SINGLE_OPTION: True})
        self.read_sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Public for the scheduler: ``with db.write_sessions.begin() as s: ...``.
        self.write_sessions = sessionmaker(write_engine, expire_on_commit=False)
        self._sqlite_writes: SqliteWriteLock | None = None
        if self.is_sqlite:
            path = self.engine.url.database
            self._sqlite_writes = SqliteWriteLock(path if path and path != ":memory:" else None)

    def __call__(self) -> Session:
        """A write session: ``Database`` doubles as a session factory for the scheduler."""
        return self.write_sessions()

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    def write(self, fn: Callable[[Session], T]) -> T:
        """Run ``fn`` in a write transaction, commit, re-run on lock contention."""
        if self._sqlite_writes is None:
            return self._run(self.write_sessions, fn)
        with self._sqlite_writes.hold():
            return self._run(self.write_sessions, fn)

    def read(self, fn: Callable[[Session], T]) -> T:
        """Run ``fn`` in a read-only transaction (never committed)."""
        return self._run(self.read_sessions, fn, commit=False)

    def read_core(self, fn: Callable[[Connection], T]) -> T:
        """Hot read path: ``fn(connection)`` with Core statements, no ORM session.

        On SQLite no explicit BEGIN is sent, so each statement reads its own snapshot: use it
        for reads where statements need not agree with each other (a job and its queue
        position). Retries on lock contention like the others, and on PostgreSQL once more
        on a connection the server had dropped (SQLAlchemy has then invalidated the pool).
        """
        for attempt in range(_RETRIES):
            try:
                with self._single_engine.connect() as conn:
                    return fn(conn)
            except DBAPIError as exc:
                if exc.connection_invalidated and attempt == 0:
                    continue
                if not is_retryable(exc) or attempt == _RETRIES - 1:
                    raise
                time.sleep(min(0.5, 0.01 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def _run(
        self, factory: sessionmaker[Session], fn: Callable[[Session], T], *, commit: bool = True
    ) -> T:
        for attempt in range(_RETRIES):
            try:
                with factory() as session:
                    result = fn(session)
                    if commit:
                        session.commit()
                    # A read just closes: close() rolls the connection back without expiring
                    # the loaded objects (rollback() would).
                    return result
            except OperationalError as exc:
                if not is_retryable(exc) or attempt == _RETRIES - 1:
                    raise
                time.sleep(min(0.5, 0.01 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    @property
    def hot_engine(self) -> Engine:
        """The engine ``read_core`` runs on (its own pool on PostgreSQL)."""
        return self._single_engine.engine

    def dispose(self) -> None:
        self.engine.dispose()
        if self._single_engine.engine is not self.engine:
            self._single_engine.engine.dispose()
