"""The queued and active jobs as the scheduler's snapshot reads them, kept across ticks.

``JobRows.refresh(session)`` runs in the snapshot's read transaction (``db.changes``,
``consistent``) and brings what it holds up to that snapshot: the jobs whose row or attempts
changed since its last read are read again by id; every other job keeps its row, attempts,
step rate and the same ``QueueEntry`` object (the plan's ``QueueIndex`` tells by identity
what changed). Step rates are read again for the active jobs among the changed ones: a
metrics batch always writes its job's row too (``jobs.attempts``). It reads everything
instead (one query per table) when its ``ChangeCursor`` says so: nothing read yet, the
watermark uncertain or gone back, a deletion, a quarter or more changed, or every
``full_every_s``. The queue columns (position, reason, ETAs, stale mark: ``Stored``) are
kept as read and then as the leader writes them (``wrote``): those writes are not stamped.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.changes import ChangeCursor
from service.db.sqltime import as_utc
from service.db.tables import ACTIVE, Attempt, Job, MetricPoint
from service.jobs.states import ACTIVE_STATES, JobStatus
from service.policy.snapshot import ActiveJob, QueueEntry, queue_entry

__all__ = ["STATUSES", "STORED_COLUMNS", "JobRow", "JobRows", "Stored"]

STATUSES = sorted([str(JobStatus.QUEUED), *(str(s) for s in ACTIVE_STATES)])

# What the policy reads (Core rows, not ORM objects: 12,000 rows at scale) ...
_POLICY_COLUMNS = (
    Job.id,
    Job.team,
    Job.priority,
    Job.created_at,
    Job.num_workers,
    Job.cpus_per_worker,
    Job.gpus_per_worker,
    Job.spec["max_runtime_seconds"].label("max_runtime"),
    Job.spec["scheduling"].label("scheduling"),
    # The accelerator types it may run on (submit kept those whose card holds its plan).
    Job.spec[("resources", "accelerator")].label("accelerator"),
    # An int (rigid), or an elastic job's {min, max} (``Job.num_workers`` is its width now).
    Job.spec[("resources", "num_workers")].label("workers"),
)
# ... what the running ends read, and what the scheduler last wrote (``record.store_queue``
# writes only what differs from it).
STORED_COLUMNS = (
    "queue_position",
    "pending_reason",
    "estimated_start_at",
    "estimated_start_p90_at",
    "estimated_end_at",
    "queue_stale",
)
_COLUMNS = (
    *_POLICY_COLUMNS,
    Job.status,
    Job.progress_step,
    Job.progress_total_steps,
    *(getattr(Job, c) for c in STORED_COLUMNS),
)
_ATTEMPT_COLUMNS = (
    Attempt.job_id,
    Attempt.number,
    Attempt.status,
    Attempt.started_at,
    Attempt.ended_at,
    Attempt.stop_requested_at,
    Attempt.accelerator,
)
_CHUNK = 5000  # bounded IN lists


class Stored(NamedTuple):
    """A job's queue columns as the scheduler last saw them: read with its row, then as it
    wrote them (``JobRows.wrote``). Writes of only these columns are not stamped (only the
    leader makes them), so what it keeps of them is what it read or wrote."""

    status: str
    queue_position: int | None
    pending_reason: str | None
    estimated_start_at: datetime | None
    estimated_start_p90_at: datetime | None
    estimated_end_at: datetime | None
    queue_stale: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRow:
    """One queued or active job as last read: its row (``_COLUMNS``; its queue columns are
    ``JobRows.stored``'s), its policy entry, run time of its ended attempts, its active
    attempt (if any) and that attempt's step rate."""

    row: Any
    status: str
    queued: bool
    key: tuple[Any, ...]  # what the entry is built from: same key, same entry object
    entry: QueueEntry
    current: Any | None
    rate: float | None


def _stored(row: Any) -> Stored:
    start, end, p90 = row.estimated_start_at, row.estimated_end_at, row.estimated_start_p90_at
    return Stored(
        status=str(row.status),
        queue_position=row.queue_position,
        pending_reason=row.pending_reason,
        estimated_start_at=None if start is None else as_utc(start),
        estimated_start_p90_at=None if p90 is None else as_utc(p90),
        estimated_end_at=None if end is None else as_utc(end),
        queue_stale=bool(row.queue_stale),
    )


def _range(value: Any) -> tuple[int, int] | None:
    """``resources.num_workers`` as stored: an elastic job's (min, max), or None (rigid)."""
    if isinstance(value, dict) and "min" in value and "max" in value:
        return int(value["min"]), int(value["max"])
    return None


def _width(row: Any, queued: bool) -> int:
    """The width the policy sees: an elastic job queues at ``min`` and runs at its attempt's
    width (the claim wrote it to ``Job.num_workers``); a rigid job at ``num_workers``."""
    got = _range(row.workers)
    return got[0] if got is not None and queued else int(row.num_workers)


class _Gang(NamedTuple):
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float


def _entry(row: Any, *, run_s: float, queued_since: datetime | None, width: int) -> QueueEntry:
    runtime = row.max_runtime
    scheduling = row.scheduling if isinstance(row.scheduling, dict) else {}
    return queue_entry(
        job_id=row.id,
        team=row.team,
        priority=row.priority,
        gang=_Gang(width, float(row.cpus_per_worker), float(row.gpus_per_worker)),
        created_at=as_utc(row.created_at),
        queued_since=queued_since,
        max_runtime_s=float(runtime) if runtime is not None else None,
        run_s=run_s,
        preemptible=bool(scheduling.get("preemptible", True)),
        accelerators=_types(row.accelerator),
        workers=_range(row.workers),
    )


def _types(value: Any) -> tuple[str, ...]:
    """``resources.accelerator`` as stored: a name, a list in order of preference, or null."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return ()


def _job_row(row: Any, attempts: Sequence[Any], rate: float | None, old: JobRow | None) -> JobRow:
    done = [a for a in attempts if a.status != ACTIVE and a.ended_at is not None]
    run_s = sum((as_utc(a.ended_at) - as_utc(a.started_at)).total_seconds() for a in done)
    last_end = max((as_utc(a.ended_at) for a in done), default=None)
    status = str(row.status)
    width = _width(row, status == JobStatus.QUEUED)
    key = (tuple(row[: len(_POLICY_COLUMNS)]), run_s, last_end, width)
    if old is not None and old.key == key:
        entry = old.entry
    else:
        entry = _entry(row, run_s=run_s, queued_since=last_end, width=width)
    current = next((a for a in attempts if a.status == ACTIVE), None)
    return JobRow(
        row=row,
        status=status,
        queued=status == JobStatus.QUEUED,
        key=key,
        entry=entry,
        current=current,
        rate=rate,
    )


def _step_rates(session: Session, current: Mapping[str, int]) -> dict[str, float]:
    """Job id -> steps per second over its current attempt's metric points (one grouped
    query per chunk of jobs); absent until two distinct steps."""
    out: dict[str, float] = {}
    ids = list(current)
    for i in range(0, len(ids), _CHUNK):
        rows = session.execute(
            select(
                MetricPoint.job_id,
                MetricPoint.attempt,
                func.min(MetricPoint.step),
                func.max(MetricPoint.step),
                func.min(MetricPoint.time),
                func.max(MetricPoint.time),
            )
            .where(MetricPoint.job_id.in_(ids[i : i + _CHUNK]))
            .group_by(MetricPoint.job_id, MetricPoint.attempt)
        ).all()
        for job_id, attempt, lo, hi, t0, t1 in rows:
            if current.get(job_id) != attempt:
                continue
            if lo is None or hi is None or hi <= lo or t0 is None or t1 is None:
                continue
            seconds = (as_utc(t1) - as_utc(t0)).total_seconds()
            if seconds > 0:
                out[job_id] = (hi - lo) / seconds
    return out


def _read(
    session: Session, ids: Collection[str] | None, old: Mapping[str, JobRow]
) -> dict[str, JobRow]:
    """The jobs among ``ids`` (None: all) that are queued or active now, with their attempts
    and step rates; ``old``: last read's rows, whose entries are kept when unchanged."""
    rows: list[Any] = []
    got: list[Any] = []
    in_statuses = Job.status.in_(STATUSES)
    if ids is None:
        rows += session.execute(select(*_COLUMNS).where(in_statuses))
        got += session.execute(
            select(*_ATTEMPT_COLUMNS)
            .join(Job, Job.id == Attempt.job_id)
            .where(in_statuses)
            .order_by(Attempt.job_id, Attempt.number)
        )
    else:
        ordered = sorted(ids)
        for k in range(0, len(ordered), _CHUNK):
            chunk = ordered[k : k + _CHUNK]
            rows += session.execute(select(*_COLUMNS).where(in_statuses, Job.id.in_(chunk)))
            got += session.execute(
                select(*_ATTEMPT_COLUMNS)
                .where(Attempt.job_id.in_(chunk))
                .order_by(Attempt.job_id, Attempt.number)
            )
    attempts: dict[str, list[Any]] = defaultdict(list)
    for a in got:
        attempts[a.job_id].append(a)
    currents = {
        r.id: a.number
        for r in rows
        if r.status != JobStatus.QUEUED
        for a in attempts[r.id]
        if a.status == ACTIVE
    }
    rates = _step_rates(session, currents) if currents else {}
    return {
        r.id: _job_row(r, attempts[r.id], rates.get(r.id), old.get(r.id))
        for r in sorted(rows, key=lambda r: r.id)
    }


class JobRows:
    """See the module docstring. The live loop holds one; ``refresh`` once per snapshot."""

    def __init__(self, *, full_every_s: float = 600.0) -> None:
        self.cursor = ChangeCursor(full_every_s=full_every_s)
        self.jobs: dict[str, JobRow] = {}  # id -> row; read-only outside this class
        self._queued_ids: list[str] = []  # ascending
        self._active_ids: list[str] = []
        self._queued: list[QueueEntry] | None = None  # in id order; None: to build again
        self._active: list[JobRow] | None = None
        # Ids whose queued entry may differ from the last ``take_changed``; None: any.
        self._changed: set[str] | None = None
        # Each job's queue columns as last read or written (``Stored``), and the queued jobs
        # whose estimate is not marked stale (``record.store_queue`` reads both).
        self.stored: dict[str, Stored] = {}
        self.not_stale: set[str] = set()
        # Active job -> (its row, the ``ActiveJob`` built from it), for the snapshot to reuse
        # while the row is the same and its expected end does not move with the clock.
        self.built: dict[str, tuple[JobRow, ActiveJob]] = {}
        self.last_read = ""  # "full: <why>" or "changed: <n>" (logs, the bench)
        self.read_in_full = False  # since the owner last cleared it

    def refresh(self, session: Session) -> None:
        """Bring the rows up to this read transaction's snapshot (see the module docstring).
        Holds what it held until every read has succeeded: a failed read changes nothing."""
        got = self.cursor.changes(session, len(self.jobs))
        if got.ids is None:
            self._replace(_read(session, None, self.jobs))
            self.read_in_full = True
        elif got.ids:
            self._apply(got.ids, _read(session, got.ids, self.jobs))
        self.cursor.done(got)
        self.last_read = got.why

    def _replace(self, jobs: dict[str, JobRow]) -> None:
        self.jobs = jobs  # in id order (``_read``)
        self._queued_ids = [i for i, r in jobs.items() if r.queued]
        self._active_ids = [i for i, r in jobs.items() if not r.queued]
        self.stored = {i: _stored(r.row) for i, r in jobs.items()}
        self.not_stale = {i for i, r in jobs.items() if r.queued and not r.row.queue_stale}
        self._queued = self._active = None
        self._changed = None

    def _apply(self, ids: Collection[str], fresh: Mapping[str, JobRow]) -> None:
        """The changed jobs' rows (``fresh``: those still queued or active) in place of
        theirs; the id lists and the built lists kept where nothing in them changed."""
        for i in ids:
            old, new = self.jobs.pop(i, None), fresh.get(i)
            self.stored.pop(i, None)
            if new is not None:
                self.jobs[i] = new
                self.stored[i] = _stored(new.row)
            was_q, is_q = old is not None and old.queued, new is not None and new.queued
            was_a, is_a = old is not None and not old.queued, new is not None and not new.queued
            _move(self._queued_ids, i, was_q, is_q)
            _move(self._active_ids, i, was_a, is_a)
            if new is not None and is_q and not new.row.queue_stale:
                self.not_stale.add(i)
            else:
                self.not_stale.discard(i)
            if was_q != is_q or (
                old is not None and new is not None and new.entry is not old.entry
            ):
                self._queued = None  # one joined or left the queue, or its entry changed
            if was_a or is_a:
                self._active = None
        if self._changed is not None:
            self._changed.update(ids)

    def wrote(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        """Job id -> the queue columns the scheduler has just written (committed)."""
        for job_id, v in values.items():
            got = self.stored.get(job_id)
            if got is None:
                continue
            self.stored[job_id] = got = got._replace(**v)
            if self.jobs[job_id].queued and not got.queue_stale:
                self.not_stale.add(job_id)
            else:
                self.not_stale.discard(job_id)

    def queued(self) -> list[QueueEntry]:
        """The queued jobs' entries, in id order."""
        if self._queued is None:
            self._queued = [self.jobs[i].entry for i in self._queued_ids]
        return self._queued

    def active(self) -> list[JobRow]:
        """The active jobs' rows, in id order."""
        if self._active is None:
            self._active = [self.jobs[i] for i in self._active_ids]
        return self._active

    def take_changed(self) -> dict[str, QueueEntry | None] | None:
        """Queued entry (None: not queued) of each job that may have changed since the last
        call; None when anything may have (a full read): then compare them all."""
        changed, self._changed = self._changed, set()
        if changed is None:
            return None
        out: dict[str, QueueEntry | None] = {}
        for i in changed:
            r = self.jobs.get(i)
            out[i] = r.entry if r is not None and r.queued else None
        return out


def _move(ids: list[str], job_id: str, was: bool, now: bool) -> None:
    """Keep ``ids`` (ascending) holding ``job_id`` exactly when ``now``."""
    if was == now:
        return
    k = bisect.bisect_left(ids, job_id)
    if now:
        ids.insert(k, job_id)
    else:
        del ids[k]
