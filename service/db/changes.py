"""The change watermark: which jobs changed since a reader's last read, so a read kept across
scheduler ticks re-reads only those.

Every insert or update of a ``jobs`` row (but those that set only the scheduler's own queue
columns), and every write of the ``attempts`` columns the kept reads use (not lease
renewals), stamps the row's ``change_seq`` (triggers, migration 0017). A read takes, in the
snapshot it reads everything else in, a ``Watermark`` of what that snapshot does not show;
the next read asks for the rows stamped with any of it (``changed_jobs``), so it sees every
row that changed in between, whatever order the writers committed in, and re-reads a few it
had seen (never wrong).

- PostgreSQL: ``change_seq`` is the writing transaction's id (``pg_current_xact_id()``,
  64-bit, never wraps). ``consistent`` makes the read REPEATABLE READ, so all its statements
  see one snapshot, and the watermark is that snapshot's xmax and in-progress list
  (``pg_snapshot_xmax``, ``pg_snapshot_xip``). A committed transaction's writes are in the
  snapshot exactly when its id is below xmax and not in the list (PostgreSQL's own
  visibility rule), so a write the snapshot does not show is stamped >= xmax or with a
  listed id. Transactions that write no job (a long report, an idle session) are listed but
  stamp nothing: unlike the snapshot's xmin, they cost the next read nothing.
- SQLite: ``change_seq`` is a counter (``change_counters`` row ``changes``) bumped in the
  writing transaction. SQLite admits one writer at a time, so counter values are taken in
  commit order, and a WAL read transaction sees a prefix of the commits: every change it
  does not show is stamped above the counter it reads (``low`` = that counter + 1, no list).

A deleted row leaves no stamp. Every DELETE or TRUNCATE of jobs or attempts bumps the
``deletes`` count instead (in the deleting transaction, on one row: deletions commit in
count order), and the watermark carries it: a count other than the last read's means a
deletion this snapshot shows and the last did not, and the reader reads everything.

``ChangeCursor`` is one reader's place in that stream; ``KeptRows`` keeps the rows of one
query (one per job) with it. ``watermark`` is uncertain (``low`` None: read everything)
when the triggers are missing or disabled, e.g. a SQLite table rebuilt by a later migration
that did not create them again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, or_, select, text, union
from sqlalchemy.orm import Session

from service.db.engine import Database
from service.db.tables import Attempt, Job

__all__ = ["ChangeCursor", "Changes", "KeptRows", "Watermark", "changed_jobs", "consistent"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_PG_TRIGGERS = (
    ("jobs", "jobs_change_seq"),
    ("attempts", "attempts_change_seq"),
    ("jobs", "jobs_count_deletes"),
    ("attempts", "attempts_count_deletes"),
)
_SQLITE_TRIGGERS = (
    "jobs_change_seq_insert",
    "jobs_change_seq",
    "attempts_change_seq_insert",
    "attempts_change_seq",
    "jobs_count_deletes",
    "attempts_count_deletes",
)
_DELETES = "(SELECT value FROM change_counters WHERE name = 'deletes')"
_PG_WATERMARK = text(
    "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, "
    "(SELECT count(*) FROM pg_trigger t WHERE t.tgenabled <> 'D' AND ("
    + " OR ".join(
        f"(t.tgrelid = '{rel}'::regclass AND t.tgname = '{name}')" for rel, name in _PG_TRIGGERS
    )
    + f")), {_DELETES}, "
    "ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(pg_current_snapshot()) AS x)"
)
_SQLITE_WATERMARK = text(
    "SELECT (SELECT value + 1 FROM change_counters WHERE name = 'changes'), "
    "(SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN ("
    + ", ".join(f"'{n}'" for n in _SQLITE_TRIGGERS)
    + f")), {_DELETES}"
)
_CHUNK = 5000  # bounded IN lists


@dataclass(frozen=True)
class Watermark:
    """What a snapshot does not show: changes stamped ``>= low`` or stamped with one of
    ``open`` (transactions in progress when it was taken). ``low`` None: uncertain.
    ``deletes``: the count of deletions it shows."""

    low: int | None
    deletes: int
    open: frozenset[int] = frozenset()


def _sqlite(session: Session) -> bool:
    return session.get_bind().dialect.name == "sqlite"


def consistent(session: Session) -> None:
    """Make this read transaction one snapshot (call before its first statement). SQLite's
    read transaction (WAL, ``BEGIN``) is one already."""
    if not _sqlite(session):
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def watermark(session: Session) -> Watermark:
    """This read's watermark (see the module docstring); once per read transaction (the
    readers of one snapshot share it)."""
    got = session.info.get("shunter_watermark")
    if got is None:
        got = session.info["shunter_watermark"] = _watermark(session)
    assert isinstance(got, Watermark)
    return got


def _watermark(session: Session) -> Watermark:
    sqlite = _sqlite(session)
    if sqlite:
        (low, triggers, deletes), xip = session.execute(_SQLITE_WATERMARK).one(), []
    else:
        low, triggers, deletes, xip = session.execute(_PG_WATERMARK).one()
    ok = low is not None and triggers == len(_SQLITE_TRIGGERS if sqlite else _PG_TRIGGERS)
    return Watermark(
        low=int(low) if ok else None, deletes=int(deletes or 0), open=frozenset(xip or ())
    )


def changed_jobs(session: Session, since: Watermark) -> set[str]:
    """Ids of the jobs whose row, or an attempt's stamped column, was written by a change
    the snapshot of ``since`` did not show (in any status: a job that left a kept read is
    among them); once per read transaction and ``since``."""
    assert since.low is not None
    key = ("shunter_changed", since)
    got = session.info.get(key)
    if got is None:
        stmt = union(
            select(Job.id).where(_unseen(Job.change_seq, since)),
            select(Attempt.job_id).where(_unseen(Attempt.change_seq, since)),
        )
        got = session.info[key] = set(session.execute(stmt).scalars())
    return set(got)


def _unseen(stamp: Any, mark: Watermark) -> Any:
    if not mark.open:
        return stamp >= mark.low
    return or_(stamp >= mark.low, stamp.in_(sorted(mark.open)))


@dataclass(frozen=True)
class Changes:
    """What one read must read: ``ids`` changed since the last (None: everything, ``why``)."""

    ids: set[str] | None
    why: str
    mark: Watermark


class ChangeCursor:
    """One reader's place in the change stream. ``changes(session, held)`` at the start of
    its read transaction says what to read; ``done(changes)`` once what was read is applied
    (a read that fails applies nothing and moves nothing). Everything is read when: nothing
    was read yet; the watermark is uncertain or went back (a restored database); a deletion
    happened; more than a quarter of what is ``held`` changed (one read is then cheaper than
    long id lists); or every ``full_every_s`` (a belt-and-braces refresh nothing depends
    on)."""

    def __init__(self, *, full_every_s: float = 600.0) -> None:
        self.full_every_s = full_every_s
        self._mark: Watermark | None = None
        self._full_at = -float("inf")  # time.monotonic() of the last full read

    def changes(self, session: Session, held: int) -> Changes:
        mark = watermark(session)
        why = self._full_reason(mark)
        if why is None:
            assert self._mark is not None and self._mark.low is not None
            ids = changed_jobs(session, self._mark)
            if 4 * len(ids) <= held + 100:
                return Changes(ids=ids, why=f"changed: {len(ids)}", mark=mark)
            why = f"{len(ids)} of {held} changed"
        return Changes(ids=None, why=f"full: {why}", mark=mark)

    def done(self, changes: Changes) -> None:
        self._mark = changes.mark
        if changes.ids is None:
            self._full_at = time.monotonic()
            log.debug("kept read: %s", changes.why)

    def _full_reason(self, mark: Watermark) -> str | None:
        last = self._mark
        if mark.low is None:
            return "the change triggers are missing"
        if last is None or last.low is None:
            return "first read"
        if mark.low < last.low:
            return "the change watermark went back"
        if mark.deletes != last.deletes:
            return "a job was deleted"
        if time.monotonic() - self._full_at >= self.full_every_s:
            return f"every {self.full_every_s:g} s"
        return None


class KeptRows(Generic[T]):
    """The rows of one query over jobs, one per job (its first column the job id), kept
    across reads as ``convert`` made them: ``read(session)`` (in a ``consistent`` read)
    re-runs the query only for the jobs changed since the last read. The query may read only
    what the stamps cover: columns of ``jobs``, the stamped columns of ``attempts``, and
    what changes only with a write of the job's row (a metrics batch writes it)."""

    def __init__(
        self,
        query: Select[*tuple[Any, ...]],
        convert: Callable[[Session, Sequence[Any]], list[T]],
        *,
        full_every_s: float = 600.0,
    ) -> None:
        self.query, self.convert = query, convert
        self.cursor = ChangeCursor(full_every_s=full_every_s)
        self._kept: dict[str, T] = {}
        self._sorted: list[T] | None = []
        self.last_read = ""

    def fetch(self, db: Database) -> list[T]:
        """``read`` in a read transaction of its own (one snapshot)."""

        def go(session: Session) -> list[T]:
            consistent(session)
            return self.read(session)

        return db.read(go)

    def read(self, session: Session) -> list[T]:
        """Every row of the query as of this read's snapshot, in job id order."""
        got = self.cursor.changes(session, len(self._kept))
        if got.ids is None:
            kept = self._fetch(session, None)
        else:
            kept = self._kept
            fresh = self._fetch(session, got.ids) if got.ids else {}
            if fresh or any(i in kept for i in got.ids):
                kept = {i: v for i, v in kept.items() if i not in got.ids} | fresh
        if kept is not self._kept:
            self._kept, self._sorted = kept, None
        self.cursor.done(got)
        self.last_read = got.why
        if self._sorted is None:
            self._sorted = [kept[i] for i in sorted(kept)]
        return self._sorted

    def _fetch(self, session: Session, ids: Collection[str] | None) -> dict[str, T]:
        conn = session.connection()
        if ids is None:
            rows = list(conn.execute(self.query))
        else:
            ordered, rows = sorted(ids), []
            for k in range(0, len(ordered), _CHUNK):
                rows += conn.execute(self.query.where(Job.id.in_(ordered[k : k + _CHUNK])))
        return dict(zip((r[0] for r in rows), self.convert(session, rows), strict=True))
