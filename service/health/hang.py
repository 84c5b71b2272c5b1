"""The hang watch: catch running jobs whose steps stopped, keep their stacks, resume them.

Every scheduler tick the leader calls ``HangWatch.sweep`` (the scheduler's watch handles a
hung attempt on a thread of its own, so placement never waits for a dump):

1. ONE query reads every starting/running job's active attempt (no stop or cancel pending):
   its launch time, the job's ``updated_at`` (written on the service's clock by each metrics
   batch, checkpoint and restart: the time the newest step reached the service), whether the
   attempt reported any step (an indexed EXISTS), and ``latest_metrics.step_time_s``, which
   feeds ``hang_rule.StepTimes`` (the p50 per attempt, kept in memory: no history read).
   The watch keeps these rows across sweeps and re-reads only the jobs changed since its
   last (``db.changes.KeptRows``: a metrics batch writes its job's row).
   The spec fields it judges by (``health.hang``, ``training.logging_steps``,
   ``max_restarts``) are read once per job, by JSON path, and kept (a spec does not change);
2. ``hang_rule.hang_verdict`` judges each one against its spec's ``health.hang``;
3. for a hung attempt: the ranks' processes (``rank_files``, as the workers reported them)
   are dumped on their nodes (``Launcher.dump_stacks``) into ``stacks.txt``; then, in one
   transaction and only if the job made no progress meanwhile, a ``hung`` event names the step
   and the ranks that did not move, and ``hang_rule.decide_after_hang`` either requeues it
   through ``loss.lose_attempt`` (cause ``HUNG``: resume from the newest verified checkpoint,
   no infra retry used) or fails it with ``error.type: hung``; last, the launcher stops the
   attempt (database first, as everywhere).

Cut off is not hung. A worker cut off from the API (a network cut, the API or its database
away) keeps stepping, but its steps reach the service only when the path is back (the
worker buffers and replays them), so ``updated_at`` alone would call it stalled. What tells
the two apart is the driver's heartbeat: a hung job's driver is a separate process that
keeps beating, a cut-off one's beats are lost with its posts. So each sweep also reads the
attempts whose heartbeat is ``silent`` (none for a third of ``lease_seconds``, two missed
beats at the defaults: one indexed query on the active attempts' lease column); such an
attempt is not judged while silent, and once its beats are back its clock restarts from the
last sweep that saw it silent: the replay of its buffered steps then has a whole bound to
land before it could be called hung.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from service.db.changes import KeptRows
from service.db.engine import Database
from service.db.sqltime import as_utc, utcnow_plus
from service.db.tables import ACTIVE, Attempt, Event, Job, MetricPoint
from service.errors import IllegalTransition
from service.health.hang_rule import (
    StepTimes,
    Verdict,
    decide_after_hang,
    hang_message,
    hang_verdict,
    hung_step,
)
from service.health.rank_files import HealthFiles
from service.jobs.attempt_loss import LossCause, lose_attempt
from service.jobs.states import ErrorInfo, JobStatus, transition
from service.launch import Launcher, RankStack, StackTarget
from shunter.jobspec.spec import HangSpec
from shunter.jobspec.vocab import EventType

__all__ = ["HangWatch", "SpecBits", "Watched", "kept_watched", "watched"]

log = logging.getLogger(__name__)
_WATCHED = (str(JobStatus.STARTING), str(JobStatus.RUNNING))
# An attempt is silent after this share of its lease without a heartbeat (two missed beats
# at the defaults: SHUNTER_HEARTBEAT_S 5, SHUNTER_LEASE_SECONDS 30).
_SILENT_FRACTION = 1 / 3


@dataclass(frozen=True, kw_only=True)
class Watched:
    job_id: str
    attempt: int
    submission_id: str
    launched_at: datetime
    updated_at: datetime
    has_step: bool
    step: int | None
    step_time_s: float | None
    logging_steps: int
    num_workers: int
    max_restarts: int
    hang: HangSpec


@dataclass(frozen=True, kw_only=True)
class SpecBits:
    """The parts of a job's spec the watch reads (a spec does not change once submitted)."""

    logging_steps: int
    max_restarts: int
    hang: HangSpec


@functools.lru_cache(maxsize=1024)
def _hang_spec(text: str | None) -> HangSpec:
    """A spec's ``health.hang`` (JSON text as stored) -> ``HangSpec``; specs share a few."""
    return HangSpec.model_validate(json.loads(text) if text else {})


def _spec_bits(session: Session, job_ids: list[str]) -> dict[str, SpecBits]:
    """Only the spec fields the watch reads, by JSON path (a spec is kilobytes)."""
    out: dict[str, SpecBits] = {}
    for k in range(0, len(job_ids), 5000):  # bounded IN lists
        rows = session.connection().execute(
            select(
                Job.id,
                Job.spec[("training", "logging_steps")],
                Job.spec["max_restarts"],
                Job.spec[("health", "hang")].as_string(),
            ).where(Job.id.in_(job_ids[k : k + 5000]))
        )
        for job_id, logging_steps, max_restarts, hang in rows:
            out[job_id] = SpecBits(
                logging_steps=int(logging_steps or 1),
                max_restarts=int(max_restarts or 0),
                hang=_hang_spec(hang),
            )
    return out


_HAS_STEP = exists().where(MetricPoint.job_id == Job.id, MetricPoint.attempt == Job.attempt)
# Every watched attempt (Core rows, none of the spec: a tick reads them all). What it reads
# changes only with a write of the job's row (a metrics batch writes it) or of an attempt
# column the change stamps cover, so the scheduler's watch keeps it (``db.changes``).
_QUERY = (
    select(
        Job.id,
        Job.attempt,
        Attempt.submission_id,
        Attempt.started_at,
        Job.updated_at,
        _HAS_STEP,
        Job.progress_step,
        Job.latest_metrics["step_time_s"],
        Job.num_workers,
    )
    .join(Attempt, (Attempt.job_id == Job.id) & (Attempt.status == ACTIVE))
    .where(
        Job.status.in_(_WATCHED),
        Job.cancel_requested.is_(False),
        Attempt.stop_cause.is_(None),
    )
    .order_by(Job.id)
)


def _watched(session: Session, rows: Sequence[Any], specs: dict[str, SpecBits]) -> list[Watched]:
    """Rows of ``_QUERY`` -> ``Watched``; the spec fields of jobs not in ``specs`` are read
    (one query) and added to it."""
    new = [r[0] for r in rows if r[0] not in specs]
    if new:
        specs.update(_spec_bits(session, new))
    out = []
    for r in rows:
        step_time, bits = r[7], specs[r[0]]
        out.append(
            Watched(
                job_id=r[0],
                attempt=r[1],
                submission_id=r[2],
                launched_at=as_utc(r[3]),
                updated_at=as_utc(r[4]),
                has_step=bool(r[5]),
                step=r[6],
                step_time_s=float(step_time) if isinstance(step_time, int | float) else None,
                logging_steps=bits.logging_steps,
                num_workers=r[8],
                max_restarts=bits.max_restarts,
                hang=bits.hang,
            )
        )
    return out


def watched(session: Session) -> list[Watched]:
    """Every attempt the watch judges, read in full (see the module docstring)."""
    return _watched(session, list(session.connection().execute(_QUERY)), {})


def kept_watched(specs: dict[str, SpecBits]) -> KeptRows[Watched]:
    """``watched`` kept across sweeps (``db.changes.KeptRows``); ``specs``: the spec fields
    read so far, by job id (a spec does not change once submitted)."""
    return KeptRows(_QUERY, lambda session, rows: _watched(session, rows, specs))


class HangWatch:
    """See the module docstring. Owned by the scheduler; ``sweep`` runs inside its tick."""

    def __init__(
        self,
        *,
        files: HealthFiles,
        dump_timeout_s: float,
        max_infra_retries: int,
        background: bool = False,
        lease_seconds: float | None = None,
    ) -> None:
        self.files = files
        # The attempts' lease: with it, attempts whose heartbeat went silent are not judged
        # (cut off is not hung: module docstring); None judges by steps alone.
        self.lease_seconds = lease_seconds
        self._silent_at: dict[tuple[str, int], datetime] = {}  # the last sweep that saw it
        self.dump_timeout_s = dump_timeout_s
        self.max_infra_retries = max_infra_retries
        self.times = StepTimes()
        self._specs: dict[str, SpecBits] = {}  # job id -> its spec's fields (immutable)
        # The watched attempts, kept across sweeps: each re-reads only the jobs changed since.
        self._rows = kept_watched(self._specs)
        # background: the dump and the end run on a thread, so the scheduler's tick (placing
        # other jobs) never waits for a dump; tests use the synchronous form.
        self._pool = (
            ThreadPoolExecutor(max_workers=2, thread_name_prefix="shunter-hang")
            if background
            else None
        )
        self._lock = threading.Lock()
        # Attempts being handled or handled: never dumped twice, even by a tick whose read
        # predates the end (it would overwrite the stacks with a dump of killed processes).
        self._claimed: set[tuple[str, int]] = set()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def sweep(self, db: Database, launcher: Launcher, *, now: datetime | None = None) -> list[str]:
        """Judge every watched attempt; handle the hung ones. Returns their job ids."""
        now = now or datetime.now(UTC)
        rows = self._rows.fetch(db)
        keys = {(w.job_id, w.attempt) for w in rows}
        self.times.keep_only(keys)
        for gone in self._specs.keys() - {w.job_id for w in rows}:
            del self._specs[gone]
        with self._lock:
            self._claimed &= keys  # an ended attempt is no longer read: forget it
        silent = self._silent(db, now, keys)
        hung = []
        for w in rows:
            key = (w.job_id, w.attempt)
            if w.has_step:
                self.times.add(key, step=w.step, value=w.step_time_s)
            if key in silent:
                continue  # cut off or hung: no telling while its heartbeats are missing
            back = self._silent_at.get(key)  # its clock restarts when its beats came back
            verdict = hang_verdict(
                now=now,
                launched_at=max(w.launched_at, back) if back else w.launched_at,
                last_step_at=(max(w.updated_at, back) if back else w.updated_at)
                if w.has_step
                else None,
                p50_step_s=self.times.p50(key),
                logging_steps=w.logging_steps,
                hang=w.hang,
            )
            if verdict is None:
                continue
            with self._lock:
                if key in self._claimed:
                    continue
                self._claimed.add(key)
            if self._pool is not None:
                self._pool.submit(self._handle, db, launcher, w, verdict)
                hung.append(w.job_id)
            elif self._handle(db, launcher, w, verdict):
                hung.append(w.job_id)
        return hung

    def _silent(
        self, db: Database, now: datetime, keys: set[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        """The watched attempts whose heartbeat is silent now (no beat for a third of the
        lease, on the database clock); each is stamped ``now`` in ``_silent_at``."""
        if self.lease_seconds is None:
            return set()
        renewed_within = self.lease_seconds * (1 - _SILENT_FRACTION)
        rows = db.read(
            lambda s: s.execute(
                select(Attempt.job_id, Attempt.number).where(
                    Attempt.status == ACTIVE,
                    Attempt.lease_expires_at < utcnow_plus(renewed_within),
                )
            ).all()
        )
        silent = {(r[0], r[1]) for r in rows} & keys
        self._silent_at = {k: t for k, t in self._silent_at.items() if k in keys}
        for key in silent:
            self._silent_at[key] = now
        return silent

    def _handle(self, db: Database, launcher: Launcher, w: Watched, verdict: Verdict) -> bool:
        ended = False
        try:
            ended = self._respond(db, launcher, w, verdict)
        except Exception:  # one job's failure must not end the watch
            log.exception("handling hung job %s failed", w.job_id)
        if not ended:  # a false alarm (a step arrived) or an error: judge it again later
            with self._lock:
                self._claimed.discard((w.job_id, w.attempt))
        return ended

    def _respond(self, db: Database, launcher: Launcher, w: Watched, verdict: Verdict) -> bool:
        targets = self.files.workers(job_id=w.job_id, attempt=w.attempt)
        stacks: list[RankStack] = []
        note = ""
        if targets:
            try:
                stacks = launcher.dump_stacks(targets, timeout_s=self.dump_timeout_s)
            except Exception as e:  # no stacks is no reason to leave the job hung
                note = f"stack dump failed: {type(e).__name__}: {e}"
                log.warning("job %s: %s", w.job_id, note)
        text = render_stacks(w, verdict, targets, stacks, note)
        self.files.put_stacks(job_id=w.job_id, attempt=w.attempt, text=text)
        ranks = describe_ranks(w.num_workers, targets, stacks)
        try:
            moved = db.write(lambda s: self._end(s, w, verdict, ranks))
        except IllegalTransition as e:  # the job moved meanwhile (a report, a cancel)
            log.info("job %s moved while ending its hung attempt: %s", w.job_id, e)
            return False
        if not moved:
            return False
        try:
            launcher.stop(w.submission_id)
        except Exception as e:  # fenced anyway: its next write gets 409
            log.warning("stop of hung %s failed: %s", w.submission_id, e)
        return True

    def _end(self, session: Session, w: Watched, verdict: Verdict, ranks: str) -> bool:
        """The ``hung`` event, then requeue or fail; False when the job moved meanwhile."""
        now = session.execute(
            select(Job.updated_at, Attempt.status)
            .join(Attempt, (Attempt.job_id == Job.id) & (Attempt.number == w.attempt))
            .where(Job.id == w.job_id)
        ).first()
        if now is None or now[1] != ACTIVE or as_utc(now[0]) != w.updated_at:
            return False  # a step (or an end) reached the service during the dump
        step = w.step if w.has_step else None
        earlier = _earlier_hangs(session, w.job_id)
        decision = decide_after_hang(step=step, earlier=earlier, max_restarts=w.max_restarts)
        message = hang_message(step=step, attempt=w.attempt, verdict=verdict, ranks=ranks)
        stacks = f"stacks: GET /v1/jobs/{w.job_id}/stacks?attempt={w.attempt}"
        session.add(
            Event(
                job_id=w.job_id,
                type=EventType.HUNG,
                message=f"{message}; {stacks}; {decision.why}",
                attempt=w.attempt,
            )
        )
        session.flush()
        if decision.fail:
            transition(
                session,
                job_id=w.job_id,
                to=JobStatus.FAILED,
                event_type=EventType.FAILED,
                message=f"attempt {w.attempt} hung: {decision.why}",
                error=ErrorInfo(type="hung", message=f"{message}; {decision.why}"),
            )
            return True
        lost = lose_attempt(
            session,
            job_id=w.job_id,
            attempt=w.attempt,
            cause=LossCause.HUNG,
            detail=f"no step progress; {stacks}",
            max_infra_retries=self.max_infra_retries,
        )
        return lost is not None


def _earlier_hangs(session: Session, job_id: str) -> list[int | None]:
    """The steps of the job's hangs since it was submitted or last resumed by a user (a
    resume starts a fresh budget, as it does for infra retries)."""
    rows = session.execute(
        select(Event.type, Event.message)
        .where(Event.job_id == job_id, Event.type.in_(("hung", "resumed")))
        .order_by(Event.id)
    ).all()
    out: list[int | None] = []
    for kind, message in rows:
        if kind == "resumed":
            out = []
        elif (parsed := hung_step(message))[0]:
            out.append(parsed[1])
    return out


def describe_ranks(num_workers: int, targets: list[StackTarget], stacks: list[RankStack]) -> str:
    """Which ranks did not move (no CPU time over the sample: stopped or blocked), which still
    ran (spinning in a collective, likely waiting on the others), which never reported."""
    still = [s.rank for s in stacks if s.cpu_s is not None and s.cpu_s < 0.01]
    busy = [s.rank for s in stacks if s.cpu_s is not None and s.cpu_s >= 0.01]
    unknown = sorted({t.rank for t in targets} - set(still) - set(busy))
    missing = sorted(set(range(num_workers)) - {t.rank for t in targets})
    parts = []
    if still:
        stopped = [s.rank for s in stacks if s.state == "T"]
        extra = f" (stopped: {_ranks(stopped)})" if stopped else ""
        parts.append(f"ranks that did not move: {_ranks(still)}{extra}")
    if busy:
        parts.append(f"ranks still using CPU: {_ranks(busy)}")
    if unknown:
        parts.append(f"ranks not dumped: {_ranks(unknown)}")
    if missing:
        parts.append(f"ranks that never reported their process: {_ranks(missing)}")
    return "; ".join(parts) or "no rank reported its process"


def _ranks(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def render_stacks(
    w: Watched, verdict: Verdict, targets: list[StackTarget], stacks: list[RankStack], note: str
) -> str:
    where = {t.rank: t for t in targets}
    head = hang_message(
        step=w.step if w.has_step else None, attempt=w.attempt, verdict=verdict, ranks=""
    ).rstrip("; ")
    lines = [f"job {w.job_id}: {head}"]
    if note:
        lines.append(note)
    if not targets:
        lines.append("no rank reported its process; no stacks")
    for s in stacks:
        t = where.get(s.rank)
        at = f"pid {t.pid} on node {t.node_ip or t.node_id}" if t else "?"
        cpu = "?" if s.cpu_s is None else f"{s.cpu_s:.2f}"
        lines += ["", f"== rank {s.rank} ({at}): state {s.state}, {cpu} CPU s in 1 s ==", s.text]
    return "\n".join(lines) + "\n"
