"""The durable log store: each attempt's driver and worker output, on the job's storage.

Layout: ``<root>/<job id>/logs/attempt-<n>/<start offset, 16 digits>.log``; ``root`` is the
local storage (``Settings.storage``), or ``$SHUNTER_HOME/logs`` when storage is a URI. So the
logs sit with the job's checkpoints, outlive Ray sessions and service restarts, and go when
the job's storage goes.

Offsets are byte offsets in one attempt's output stream; they only grow. A segment file holds
the bytes from its start offset on; a new one starts once the last reaches ``segment_bytes``.
A job's logs are capped (``cap_bytes`` over all attempts): the oldest segments are deleted
first, never an attempt's newest one, so the cap holds to within one segment per attempt,
and reads of rotated-out offsets resume at the first kept byte (``truncated``).

Appends are idempotent by offset (a retried batch is stored once; a batch overlapping what is
stored keeps only its new tail) and serialised per job with ``flock`` (threads and processes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal
from service.db.rows import from_row
from service.db.sqltime import utcnow_plus
from service.db.tables import ACTIVE, Attempt, Job
from service.errors import StaleAttempt
from service.jobs.queries import visible_job
from service.jobs.states import fence_attempt
from service.launch import Launcher
from service.schemas.jobs import LogsRead
from service.settings import Settings

__all__ = [
    "LogPage",
    "LogStore",
    "admit_batch",
    "job_state",
    "read_logs",
    "store_for",
    "store_root",
]

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"^(\d{16})\.log$")
_ATTEMPT = re.compile(r"^attempt-(\d+)$")
_MIN_SEGMENT = 4096
_MAX_SEGMENT = 8 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class LogPage:
    attempt: int
    offset: int  # where ``data`` starts
    next_offset: int  # where the next page starts (== offset + len(data))
    first_offset: int  # the oldest byte still stored (older ones were rotated out)
    size: int  # the attempt's stream length so far
    truncated: bool  # the offset asked for was rotated out; the page starts at first_offset
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _utf8_cut(data: bytes) -> int:
    """Length of ``data`` without a trailing incomplete UTF-8 sequence (0-3 bytes dropped)."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return len(data) if need <= back else len(data) - back
    return len(data)


class LogStore:
    """Append and read per-attempt logs under ``root``; ``cap_bytes`` per job."""

    def __init__(self, root: Path, *, cap_bytes: int, segment_bytes: int | None = None) -> None:
        self.root = root
        self.cap_bytes = cap_bytes
        self.segment_bytes = segment_bytes or max(_MIN_SEGMENT, min(_MAX_SEGMENT, cap_bytes // 8))

    # -- paths ---------------------------------------------------------------------------
    def _job_dir(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError(f"bad job id {job_id!r}")
        return self.root / job_id / "logs"

    def _attempt_dir(self, job_id: str, attempt: int) -> Path:
        return self._job_dir(job_id) / f"attempt-{attempt:04d}"

    def _segments(self, job_id: str, attempt: int) -> list[tuple[int, Path]]:
        d = self._attempt_dir(job_id, attempt)
        if not d.is_dir():
            return []
        out = [(int(m.group(1)), p) for p in d.iterdir() if (m := _SEGMENT.match(p.name))]
        return sorted(out)

    def attempts(self, job_id: str) -> list[int]:
        """Attempt numbers with stored output, ascending."""
        d = self._job_dir(job_id)
        if not d.is_dir():
            return []
        return sorted(int(m.group(1)) for p in d.iterdir() if (m := _ATTEMPT.match(p.name)))

    @contextlib.contextmanager
    def _locked(self, job_id: str) -> Iterator[None]:
        d = self._job_dir(job_id)
        d.mkdir(parents=True, exist_ok=True)
        with open(d / ".lock", "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- write ---------------------------------------------------------------------------
    def size(self, job_id: str, attempt: int) -> int:
        segs = self._segments(job_id, attempt)
        if not segs:
            return 0
        start, path = segs[-1]
        return start + path.stat().st_size

    def append(self, *, job_id: str, attempt: int, offset: int, data: bytes) -> int:
        """Store ``data`` as the bytes from ``offset`` on; return the stream's new length.

        Bytes already stored are skipped (a retry); an ``offset`` past the end (the store lost
        bytes, e.g. deleted meanwhile) appends at the end."""
        with self._locked(job_id):
            end = self.size(job_id, attempt)
            if offset < end:
                data = data[end - offset :]
            if not data:
                return end
            segs = self._segments(job_id, attempt)
            if segs and segs[-1][1].stat().st_size < self.segment_bytes:
                path = segs[-1][1]
            else:
                path = self._attempt_dir(job_id, attempt) / f"{end:016d}.log"
                path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(data)
            self._rotate(job_id)
            return end + len(data)

    def _rotate(self, job_id: str) -> None:
        """Delete the oldest segments until the job is within its cap (never the newest
        segment of an attempt: it holds the stream's length)."""
        every = [
            (attempt, start, path)
            for attempt in self.attempts(job_id)
            for start, path in self._segments(job_id, attempt)
        ]
        total = sum(p.stat().st_size for _, _, p in every)
        newest = {a: max(s for b, s, _ in every if b == a) for a, _, _ in every}
        for attempt, start, path in every:
            if total <= self.cap_bytes:
                return
            if newest[attempt] == start:
                continue
            total -= path.stat().st_size
            path.unlink()

    # -- read ----------------------------------------------------------------------------
    def read(self, *, job_id: str, attempt: int, offset: int, limit: int) -> LogPage:
        """Up to ``limit`` bytes from ``offset`` (cut back to a whole UTF-8 character)."""
        segs = self._segments(job_id, attempt)
        size = self.size(job_id, attempt)
        first = segs[0][0] if segs else size
        truncated = offset < first
        start = min(max(offset, first), size)
        chunks: list[bytes] = []
        want = limit
        for seg_start, path in segs:
            if want <= 0:
                break
            seg_len = path.stat().st_size
            if seg_start + seg_len <= start:
                continue
            with open(path, "rb") as f:
                f.seek(max(0, start - seg_start) if not chunks else 0)
                piece = f.read(want)
            chunks.append(piece)
            want -= len(piece)
        data = b"".join(chunks)
        if len(data) == limit and start + len(data) < size:
            data = data[: _utf8_cut(data)] or data
        return LogPage(
            attempt=attempt,
            offset=start,
            next_offset=start + len(data),
            first_offset=first,
            size=size,
            truncated=truncated,
            data=data,
        )

    def tail(self, *, job_id: str, attempt: int, nbytes: int) -> LogPage:
        """The last ``nbytes`` bytes, from the start of a line when the window has one."""
        size = self.size(job_id, attempt)
        start = max(0, size - nbytes)
        lead = 1 if start > 0 else 0  # the byte before the window: is it a line's end?
        page = self.read(job_id=job_id, attempt=attempt, offset=start - lead, limit=nbytes + lead)
        data, offset = page.data, page.offset
        if lead and page.offset == start - lead:
            aligned, data, offset = data[:1] == b"\n", data[1:], offset + 1
        else:
            aligned = page.offset <= page.first_offset
        if not aligned and b"\n" in data[:-1]:
            skip = data.index(b"\n") + 1
            data, offset = data[skip:], offset + skip
        return dataclasses.replace(page, offset=offset, truncated=False, data=data)


def store_root(*, storage: str, home: Path) -> Path:
    """Where job logs live: the local storage, or ``$SHUNTER_HOME/logs`` for a URI storage."""
    if "://" in storage:
        return home / "logs"
    return Path(os.path.expanduser(storage))


# -- the API's side ------------------------------------------------------------------------


def admit_batch(
    session: Session, *, job_id: str, attempt: int, lease_seconds: float, grace_s: float
) -> None:
    """May this (already authenticated) attempt append output now? Yes while it is the active
    attempt (its lease is renewed, as for metrics), and for ``grace_s`` after it ended, so a
    driver's last lines (the final report, a traceback) are kept. Else ``StaleAttempt``."""
    row = session.execute(
        select(Attempt.status, Attempt.ended_at >= utcnow_plus(-grace_s)).where(
            Attempt.job_id == job_id, Attempt.number == attempt
        )
    ).first()
    if row is not None and row[0] == ACTIVE:
        fence_attempt(session, job_id=job_id, attempt=attempt, lease_seconds=lease_seconds)
        return
    if row is None or not row[1]:
        raise StaleAttempt(f"attempt {attempt} of job {job_id} ended; its output is closed")


@dataclass(frozen=True, kw_only=True)
class _Target:
    attempt: int | None
    submission_id: str | None


def _target(session: Session, *, principal: Principal, job_id: str, attempt: int | None) -> _Target:
    job = visible_job(session, principal=principal, job_id=job_id)
    number = attempt if attempt is not None else (job.attempt or None)
    if number is None:
        return _Target(attempt=None, submission_id=None)
    sub = session.execute(
        select(Attempt.submission_id).where(Attempt.job_id == job_id, Attempt.number == number)
    ).scalar_one_or_none()
    return _Target(attempt=number, submission_id=sub)


def job_state(session: Session, *, job_id: str) -> tuple[str, int]:
    """(status, current attempt number) of a job the caller already saw."""
    row = session.execute(select(Job.status, Job.attempt).where(Job.id == job_id)).one()
    return str(row[0]), int(row[1])


def read_logs(
    session: Session,
    store: LogStore,
    *,
    principal: Principal,
    job_id: str,
    attempt: int | None,
    offset: int | None,
    limit: int,
    tail: int | None,
    launcher: Launcher | None = None,
) -> LogsRead:
    """A page of an attempt's output (default: the job's current attempt), by byte range:
    ``offset`` + ``limit`` (already clamped to the page maximum), or the last ``tail`` bytes.

    When nothing is stored for the attempt yet, a tail read falls back to the launcher's live
    log (Ray's), marked ``source: launcher``."""
    t = _target(session, principal=principal, job_id=job_id, attempt=attempt)
    attempts = store.attempts(job_id)
    if t.attempt is None:
        return LogsRead(text="", submission_id=None, attempts=attempts)
    if tail is not None:
        page = store.tail(job_id=job_id, attempt=t.attempt, nbytes=min(tail, limit))
    else:
        page = store.read(job_id=job_id, attempt=t.attempt, offset=offset or 0, limit=limit)
    if page.size == 0 and offset is None and launcher is not None and t.submission_id:
        try:
            text = launcher.logs(t.submission_id, None)
        except Exception as e:  # Ray gone or unreachable: nothing live to show
            log.info("live logs of %s unavailable: %s", t.submission_id, e)
        else:
            data = text.encode()[-min(tail or limit, limit) :]
            return LogsRead(
                text=data.decode("utf-8", errors="replace"),
                submission_id=t.submission_id,
                attempt=t.attempt,
                attempts=attempts,
                source="launcher",
            )
    return from_row(  # the page's offsets, size and truncation as read
        LogsRead,
        page,
        text=page.text,
        submission_id=t.submission_id,
        attempt=t.attempt,
        attempts=attempts,
        source="store" if page.size else "none",
    )


def store_for(settings: Settings) -> LogStore:
    """The service's log store, as its settings configure it."""
    root = store_root(storage=settings.storage, home=settings.home)
    return LogStore(root, cap_bytes=settings.log_cap_bytes)
