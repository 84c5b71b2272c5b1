"""The scheduler: a loop that places queued jobs on the launcher and keeps active ones honest.

``Scheduler(settings, db, launcher)``; ``start()`` reconciles (if this process leads) and then
runs ``tick()`` every ``settings.scheduler_interval_s`` in a daemon thread, or at once when
``wake()`` is called (a submit in this process: a job starts without waiting for the next
tick); ``stop()`` ends it and gives up the lease. ``tick()`` is synchronous and unit-tested
with ``InMemoryLauncher``. A tick that finds the database away (``db.engine.is_unavailable``)
pauses the loop with a capped backoff; the lease is kept as it is (its epoch fences claims).
One tick:

0. Lead: renew or take the scheduler lease (``scheduler.leader``); a follower does nothing.
   A process that has just taken over first reconciles with its launcher.
1. Reap: attempts whose lease expired on the database clock are marked lost
   (``service.jobs.attempt_loss.lose_attempt``, cause ``LEASE_EXPIRED``: requeue as attempt + 1
   resuming from the newest verified checkpoint, or ``retries_exhausted``), then stopped on
   the launcher. An attempt whose driver Ray has not started yet (``pending``) cannot have
   heartbeated: its lease is renewed instead. One whose driver Ray reports ``running`` is
   held for ``lease_grace_s`` first: its beats may just not have landed (the database away,
   its node cut off from the API; docs/reliability.md).
2. Sweep active jobs against the launcher (``service.jobs.reconcile.sweep_active``): finish
   cancels whose Ray job stopped, stop cancelling ones, lose attempts whose driver ended
   without a final report; stop preemption victims that did not checkpoint in time; end
   hung attempts after dumping their stacks (``service.health.hang``). The sweep and the hang
   watch keep the rows they read across ticks and re-read only the jobs changed since
   (``db.changes``).
3. Place: one snapshot (``scheduler.snapshot_reader``) -> ``policy.planner`` (priority class,
   weighted fair share, EASY reservation, gang placement; ``docs/scheduling.md``) -> ask the victims
   to checkpoint now (``scheduler.record.preempt``), claim each job that starts with the
   compare-and-set ``claim_job`` under the leader's fence and submit it
   (``<job id>-<attempt>``); then store every queued job's position, reason and ETA and
   every running job's expected end. Only the first ``SHUNTER_SCHEDULER_MAX_PLAN_DEPTH``
   queued jobs in policy order are considered (Slurm's ``bf_max_job_test``): deeper ones
   keep their last position, reason and ETA, marked stale (``jobs.queue_stale``). The
   queued and active jobs (``job_rows.JobRows``) and the plan's ``QueueIndex`` are kept
   across ticks: a tick re-reads and re-sorts only the jobs whose rows changed since the
   last (``scheduler.changes``), and writes only the values that differ from those read.
   A node the straggler watch cordoned (``service.health.straggler``) counts as not alive
   in this snapshot until its cordon expires.

Free resources: Ray's per-node free CPUs/GPUs count placement-group reservations as used,
but a job that was just claimed has no placement group yet (its driver is still starting).
So the scheduler also packs every active job onto the node totals itself and takes, per
node, the smaller of the two free figures: a just-claimed job is never double-booked.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from service.accounts.auth import hash_token, new_token
from service.db.engine import Database, is_unavailable
from service.db.tables import Job, utcnow_py
from service.errors import IllegalTransition, StaleAttempt
from service.health.hang import HangWatch
from service.health.rank_files import files_for
from service.health.straggler import cordoned_nodes
from service.jobs.attempt_loss import LossCause, lose_attempt
from service.jobs.checkpoint_now import sweep_overdue
from service.jobs.phases import PhaseMark, record_phase
from service.jobs.reconcile import HeadWatch, kept_active, reconcile_on_start, sweep_active
from service.jobs.states import (
    claim_job,
    expired_attempts,
    fence_attempt,
)
from service.launch import (
    ClusterResources,
    ClusterUnavailable,
    Launcher,
    LaunchRequest,
    LaunchState,
)
from service.policy import capacity
from service.policy.accelerators import gpu_weights
from service.policy.elastic import RESIZE_START, Resize
from service.policy.elastic import decide as decide_resizes
from service.policy.eta import EtaModel, RuntimeHistory, WaitHistory, estimate_ranges
from service.policy.planner import (
    NodeFree,
    Plan,
    PolicyConfig,
    QueueDecision,
    QueueEntry,
    plan,
)
from service.policy.queue_index import QueueIndex
from service.scheduler import owed, record
from service.scheduler.cluster_view import ClusterView, placed_type, type_nodes, without_cordoned
from service.scheduler.job_rows import JobRows
from service.scheduler.leader import LeaderLease
from service.scheduler.resize import Targets, record_start, request_resize
from service.scheduler.snapshot_reader import build_snapshot
from service.scheduler.usage import Usage

__all__ = [
    "Scheduler",
    "TickReport",
    "effective_free",
    "never_fits_reason",
    "placed_type",
    "plan_order",
    "type_nodes",
]

log = logging.getLogger(__name__)

_AWAY_MAX_S = 5.0  # the longest pause between ticks while the database is away


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]


@dataclass(kw_only=True)
class TickStats:
    """Counters of this process's ticks (exported by ``http.scheduling_metrics``)."""

    ticks: int = 0
    reservations: int = 0  # ticks whose plan held a reservation
    last_tick_s: float = 0.0
    # The last placing tick's seconds: snapshot read, plan, owed + preemptions + claims,
    # ETAs, queue writes (bench/scheduler_scale.py reports it).
    last_split: dict[str, float] = field(default_factory=dict)


@dataclass(kw_only=True)
class TickReport:
    """What one tick did (for tests and logs)."""

    reaped: list[str] = field(default_factory=list)
    swept: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)  # submission ids
    waiting: dict[str, str] = field(default_factory=dict)  # job id -> reason
    errors: list[str] = field(default_factory=list)
    preempt_timeouts: list[str] = field(default_factory=list)  # stopped: no checkpoint in time
    preempted: list[str] = field(default_factory=list)  # job ids asked to checkpoint and stop
    resized: dict[str, str] = field(default_factory=dict)  # job id -> "grow 2->4" (stopping)
    hung: list[str] = field(default_factory=list)  # job ids found hung (handled on a thread)
    leader: bool = True  # False: another process holds the scheduler lease; nothing was done


def plan_order(p: Plan) -> str:
    """The plan's order as one log line: position, job, team, started or why it waits."""
    return "; ".join(
        f"{d.position}:{d.entry.job_id}({d.entry.team})"
        + ("=start" if d.start_now else f"={d.wait.kind if d.wait else '?'}")
        for d in p.decisions
    )


def effective_free(cluster: ClusterResources, active: Sequence[QueueEntry]) -> list[NodeFree]:
    """``policy.capacity.free_now`` over the launcher's view. Pure."""
    return capacity.free_now(cluster.nodes, active)


def never_fits_reason(entry: QueueEntry, cluster: ClusterResources) -> str | None:
    """``policy.capacity.never_fits_reason`` over the launcher's view. Pure."""
    return capacity.never_fits_reason(entry, cluster.nodes)


def _settle_gc() -> None:
    """After a full read the kept rows are new long-lived objects (~80,000 at 12,000 jobs,
    besides the ~130,000 of the imported modules): collect once, then freeze everything
    alive (``gc.freeze``), so that the collector's full passes, which would scan them all
    every few ticks (~100 ms each, the tick's p99), skip them. Frozen objects are still freed
    when nothing refers to them; only cyclic garbage among them waits for the next full read
    (every ``full_every_s`` at most), which thaws, collects and freezes again. Called between
    ticks: no session or request of the tick is alive to be frozen with them."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class Scheduler:
    """See the module docstring. Thread-safe ``tick`` (one at a time, under a lock)."""

    def __init__(
        self,
        settings: Any,
        db: Database,
        launcher: Launcher,
        *,
        on_phase: Callable[[PhaseMark], None] | None = None,
        cluster_view: ClusterView | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.launcher = launcher
        # Read once per tick; submits check against it instead of calling Ray themselves.
        self.cluster_view = cluster_view or ClusterView(
            launcher, node_types=settings.node_group_accelerators
        )
        self._on_phase = on_phase  # the start-up phase histogram (claimed, launched)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by wake(): tick now instead of at the interval
        self._thread: threading.Thread | None = None
        # Only the leader ticks; claims are fenced by its epoch (service.scheduler.leader).
        self.lease = LeaderLease(db, lease_s=float(settings.scheduler_lease_s))
        self.stats = TickStats()
        self._reconciled = False
        # Kept across ticks: the queued and active jobs as last read (a tick re-reads only
        # the jobs changed since) and the plan's index over the queue (it re-sorts only
        # those); forgotten on losing the lead and after a failed placement.
        self._rows = JobRows()
        self._usage = Usage()  # the teams' usage history, kept likewise
        # How long attempts hold their capacity (÷ max_runtime, per team), learned from the
        # attempts that leave the snapshot: what the ETAs expect of running and queued jobs.
        self._runtimes = RuntimeHistory()
        # And how far the forward run's first estimates were from the starts (per team).
        self._waits = WaitHistory()
        self._index = QueueIndex(use_priority=True)
        self._targets = Targets()  # the widths resizes decided, until the restart
        # Packings of the running jobs, kept while their inputs are the same (a tick packs
        # them for the free capacity, the reservation, preemption and the ETAs).
        self._packs = capacity.PackMemo()
        self._active = kept_active()  # the active attempts, kept across sweeps
        self._head = HeadWatch()  # a Ray head outage, from the sweep that saw it to its end
        # Expired leases held while Ray reports their driver running (``_hold``): when this
        # process first saw each expired, on its monotonic clock.
        self._silent: dict[tuple[str, int], float] = {}
        self.hang_watch = HangWatch(
            files=files_for(settings),
            dump_timeout_s=float(settings.health_hang_dump_timeout_s),
            max_infra_retries=int(settings.max_infra_retries),
            background=True,
            lease_seconds=float(settings.lease_seconds),  # cut off is not hung
        )

    # -- loop -------------------------------------------------------------------------
    def start(self) -> None:
        """Reconcile with the launcher (if this process leads), then tick in a thread."""
        if self.lease.acquire():
            self._reconcile()
        self._stop.clear()
        self._wake.clear()
        self._thread = threading.Thread(target=self._run, name="shunter-scheduler", daemon=True)
        self._thread.start()

    def _reconcile(self) -> None:
        """Only a leader reconciles: a follower's launcher does not know the leader's jobs."""
        reconcile_on_start(self.db, self.launcher, self.settings)
        self._reconciled = True

    def wake(self) -> None:
        """Tick as soon as the current tick (if any) ends: something changed (a submit).
        Wakes that arrive during a tick collapse into one more tick."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self.hang_watch.close()
        with contextlib.suppress(Exception):  # best effort: the lease expires anyway
            self.lease.release()

    def _run(self) -> None:
        interval = float(self.settings.scheduler_interval_s)
        away = 0  # ticks in a row that found the database away
        while True:
            self._wake.wait(interval)  # the tick, or earlier on wake()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception as e:  # one bad tick must not end scheduling
                self._forget()  # nothing kept from a tick that failed half-way
                if not is_unavailable(e):
                    log.exception("scheduler tick failed")
                    continue
                # The database is away (restart, failover): pause with a capped backoff and
                # keep the lease as it is. Its epoch fences every claim, so after the return
                # this process renews it, or takes it over with a new epoch, or follows.
                away += 1
                if away == 1:
                    log.warning("scheduler paused: the database is away: %s", _first_line(e))
                self._stop.wait(min(_AWAY_MAX_S, interval * 2**away))
                continue
            if away:
                log.warning("scheduler resumed: the database is back after %d ticks", away)
                away = 0

    # -- one tick -----------------------------------------------------------------------
    def tick(self) -> TickReport:
        t0 = time.monotonic()
        try:
            return self._tick()
        finally:
            if self._rows.read_in_full:  # new kept rows: collect and freeze once (_settle_gc)
                self._rows.read_in_full = False
                _settle_gc()
            self.stats.ticks += 1
            self.stats.last_tick_s = time.monotonic() - t0

    def _tick(self) -> TickReport:
        with self._lock:
            t0 = time.monotonic()
            report = TickReport()
            if not self.lease.acquire():  # another process leads: it does all the work
                self._reconciled = False  # on taking over, first reconcile what it launched
                self._forget()
                report.leader = False
                with contextlib.suppress(Exception):  # this process's submits read the view
                    self.cluster_view.refresh()
                return report
            if not self._reconciled:
                self._reconcile()
            self._reap(report)
            max_retries = int(self.settings.max_infra_retries)
            swept = sweep_active(
                self.db, self.launcher, max_infra_retries=max_retries, kept=self._active,
                head=self._head,
            )  # fmt: skip
            report.swept = {k: str(v) for k, v in swept.items()}
            timeout = float(self.settings.preempt_checkpoint_timeout_s)
            report.preempt_timeouts = sweep_overdue(self.db, self.launcher, timeout_s=timeout)
            report.hung = self.hang_watch.sweep(self.db, self.launcher)
            sweeps_s = time.monotonic() - t0
            try:
                with capacity.memo(self._packs):
                    self._place(report)
            except Exception:
                self._forget()  # nothing kept from a tick that failed half-way
                raise
            self.stats.last_split["sweeps"] = sweeps_s
            return report

    def _forget(self) -> None:
        self._rows = JobRows()
        self._usage = Usage()
        self._index = QueueIndex(use_priority=True)
        self._packs = capacity.PackMemo()
        self._active = kept_active()

    def _reap(self, report: TickReport) -> None:
        expired = self.db.read(expired_attempts)
        keys = {(a.job_id, a.number) for a in expired}
        for gone in self._silent.keys() - keys:  # heartbeats are back (or it ended)
            del self._silent[gone]
        for attempt in expired:
            cause = self._expired_cause(attempt.job_id, attempt.number, attempt.submission_id)
            if cause is None:
                continue
            # Lose it in the database first (conditional on the lease still being expired):
            # a driver that heartbeated meanwhile must not be stopped.
            if self._lose_expired(attempt.job_id, attempt.number, cause) is None:
                continue
            self._silent.pop((attempt.job_id, attempt.number), None)
            report.reaped.append(attempt.submission_id)
            try:
                self.launcher.stop(attempt.submission_id)  # the old driver must not go on
            except Exception as e:  # it is fenced anyway: its next write gets 409
                report.errors.append(f"stop {attempt.submission_id}: {e}")

    def _expired_cause(self, job_id: str, number: int, submission_id: str) -> LossCause | None:
        """Why an expired lease is lost, or ``None`` when it is held (``_hold``). A lease that
        expired while the Ray head does not answer (``ClusterUnavailable``) is lost with the
        head (``RAY_HEAD_LOST``): its driver could not heartbeat, so it is gone with its node
        or cut off, and nothing vouches for it. Requeued, it waits: nothing is placed while
        the head is away (``_place``). So is one that was active through an outage and has
        not heartbeated since (``HeadWatch.pending``), though a head restarted on a Redis may
        still call it running: it went with the old head."""
        if (job_id, number) in self._head.pending:
            return LossCause.RAY_HEAD_LOST
        try:
            held = self._hold(job_id, number, submission_id)
        except ClusterUnavailable:
            return LossCause.RAY_HEAD_LOST
        return None if held else LossCause.LEASE_EXPIRED

    def _hold(self, job_id: str, number: int, submission_id: str) -> bool:
        """Whether an expired lease is kept rather than lost: Ray has not started the driver
        yet (it cannot have heartbeated: the lease is renewed; bounded by Ray, which fails a
        job whose driver never starts, RAY_JOB_START_TIMEOUT_SECONDS), or Ray reports the
        driver running and it has been silent for less than ``lease_grace_s`` past its lease:
        a worker cut off from the API, or the database away, trains on and its heartbeats
        land again when the path is back (docs/reliability.md). A driver Ray cannot vouch for
        (ended, unknown, Ray unreachable) is lost at once, as before."""
        try:
            state = self.launcher.status(submission_id).state
        except ClusterUnavailable:
            raise
        except Exception:
            return False
        if state == LaunchState.PENDING:
            lease = float(self.settings.lease_seconds)
            with contextlib.suppress(StaleAttempt):
                self.db.write(
                    lambda s: fence_attempt(s, job_id=job_id, attempt=number, lease_seconds=lease)
                )
            return True
        if state != LaunchState.RUNNING:
            return False
        first = self._silent.setdefault((job_id, number), time.monotonic())
        return time.monotonic() - first < float(self.settings.lease_grace_s)

    def _lose_expired(self, job_id: str, number: int, cause: LossCause) -> Job | None:
        retries = int(self.settings.max_infra_retries)
        return self.db.write(
            lambda s: lose_attempt(
                s,
                job_id=job_id,
                attempt=number,
                cause=cause,
                max_infra_retries=retries,
                only_if_expired=True,
            )
        )

    def _place(self, report: TickReport) -> None:
        """Snapshot -> ``policy.planner`` -> preempt, claim and submit; store the queue's
        positions, reasons and ETAs (``scheduler.record``)."""
        try:
            cluster = self.cluster_view.refresh()
        except Exception as e:  # Ray unreachable: nothing starts, and the queue says why
            report.errors.append(f"cluster: {e}")
            reason = f"waiting: the cluster (Ray) is unreachable: {type(e).__name__}: {e}"
            report.waiting = self.db.write(lambda s: record.mark_unreachable(s, reason=reason))
            self._forget()  # those reasons are not stamped: read the queue again next tick
            return
        half_life = float(self.settings.fairshare_half_life_s)
        t0 = time.perf_counter()
        cordoned = self.db.read(lambda s: cordoned_nodes(s, now=utcnow_py()))
        cluster = without_cordoned(cluster, cordoned)  # straggler cordons, until they expire
        rows, usage, tw = self._rows, self._usage, gpu_weights(self.settings)
        snap = self.db.read(
            lambda s: build_snapshot(
                s, cluster=cluster, half_life_s=half_life, rows=rows, usage=usage, type_weights=tw
            )
        )
        changed = rows.take_changed()
        if changed is None:  # read in full: compare every entry
            self._index = self._index.sync(snap.queued)
        else:
            self._index.update(changed)
        snap = replace(snap, index=self._index)
        runtimes = self._runtimes.observe(snap)
        ratios = self._waits.observe(snap)
        if not snap.queued and not snap.active:
            return
        cfg = PolicyConfig.named(
            "fair",
            grace_s=float(self.settings.fairshare_grace_s),
            min_runtime_s=float(self.settings.preempt_min_runtime_s),
        )
        t1 = time.perf_counter()
        p = plan(snap, cfg, max_depth=int(self.settings.scheduler_max_plan_depth))
        if p.deferred:
            log.debug("plan: %d queued jobs past the plan depth keep their last ETA", p.deferred)
        if log.isEnabledFor(logging.DEBUG):  # the order at the deciding tick (fair-order bugs)
            log.debug("plan order: %s", plan_order(p))
        t2 = time.perf_counter()
        self.db.write(
            lambda s: (
                owed.advance(s, snap=snap, half_life_s=half_life) if self.lease.fence(s) else None
            )
        )
        if p.reservation is not None:
            self.stats.reservations += 1
        # THE resize decision, as the simulator makes it (scheduler.resize acts on it).
        rs = decide_resizes(snap, p, min_runtime_s=cfg.preempt.min_runtime_s)
        for v in rs.preemptions:
            if self.db.write(functools.partial(record.preempt, p=v, fence=self.lease.fence)):
                report.preempted.append(v.victim.job_id)
        starts = {r.job_id: r for r in rs.resizes if r.kind == RESIZE_START}
        for r in rs.resizes:
            if r.kind != RESIZE_START and self.db.write(
                functools.partial(request_resize, r=r, fence=self.lease.fence)
            ):
                report.resized[r.job_id] = f"{r.kind} {r.entry.num_workers}->{r.to}"
                self._targets.want(r.job_id, r.to)
        for d in p.starts:
            w = starts[d.entry.job_id].to if d.entry.job_id in starts else d.entry.num_workers
            if d.entry.elastic and self._targets.hold(self.db, self.launcher, d.entry.job_id, w):
                continue  # Ray still counts its last attempt's workers: start it at a later tick
            self._start(
                d, report, only_nodes=type_nodes(snap, d), accelerator=placed_type(snap, d),
                resize=starts.get(d.entry.job_id),
            )  # fmt: skip
        t3 = time.perf_counter()
        model = EtaModel(
            runtime=runtimes, wait_ratios=ratios, waiting=self._waits.waiting(snap.now),
            checks=tuple(self._waits.checks),
        )  # fmt: skip
        ranges = estimate_ranges(snap, plan_now=p, model=model) if p.decisions else {}
        self._waits.estimated(snap, ranges)
        etas = {i: r.start for i, r in ranges.items()}
        etas_p90 = {i: r.p90 for i, r in ranges.items()}
        t4 = time.perf_counter()
        reasons = {d.entry.job_id: d.reason for d in p.decisions if d.reason is not None}
        written = self.db.write(
            lambda s: record.store_queue(
                s,
                plan=p,
                reasons=reasons,
                starts=etas,
                starts_p90=etas_p90,
                snap=snap,
                computed_at=snap.now,
                stored=rows,
                fence=self.lease.fence,
            )
        )
        rows.wrote(written)  # committed: not stamped, so applied to what is kept here
        report.waiting = reasons
        self.stats.last_split = {
            "snapshot": t1 - t0,
            "plan": t2 - t1,
            "starts": t3 - t2,
            "etas": t4 - t3,
            "writes": time.perf_counter() - t4,
        }

    def _start(
        self,
        d: QueueDecision,
        report: TickReport,
        *,
        only_nodes: tuple[str, ...] = (),
        accelerator: str = "",
        resize: Resize | None = None,
    ) -> None:
        token = new_token()
        lease = float(self.settings.lease_seconds)
        job_id = d.entry.job_id
        width = d.entry.num_workers if resize is None else resize.to  # elastic: min or wider

        def _claim(s: Any) -> tuple[Any, PhaseMark | None]:
            if not self.lease.fence(s):  # a deposed leader claims nothing
                return None, None
            got = claim_job(
                s, job_id=job_id, token_hash=hash_token(token), lease_seconds=lease,
                num_workers=width,
            )  # fmt: skip
            if got is None:
                return None, None
            if d.entry.elastic:  # the width it starts at, and why (scheduler.resize)
                record_start(s, d.entry, width=width, resize=resize, attempt=got.number)
            if accelerator:  # the type it was placed on: per-type quotas, weighted GPU-hours
                got.accelerator = accelerator
            return got, record_phase(s, job_id=job_id, attempt=got.number, phase="claimed")

        attempt, claimed = self.db.write(_claim)
        if attempt is None:  # cancelled or claimed by another scheduler meanwhile
            return
        self._observe(claimed)
        req = LaunchRequest(
            submission_id=attempt.submission_id,
            job_id=d.entry.job_id,
            attempt=attempt.number,
            api_url=str(self.settings.public_url),
            attempt_token=token,
            num_workers=width,
            cpus_per_worker=d.entry.cpus_per_worker,
            gpus_per_worker=d.entry.gpus_per_worker,
            only_nodes=only_nodes,
        )
        try:
            self.launcher.submit(req)
        except Exception as e:
            # Ray refused or is unreachable: the attempt is lost now (counts against the
            # infra-retry budget, so a broken cluster cannot loop a job forever).
            detail = f"{type(e).__name__}: {e}"[:500]
            log.warning("submit %s failed: %s", req.submission_id, e)
            report.errors.append(f"submit {req.submission_id}: {e}")
            with contextlib.suppress(IllegalTransition):
                self.db.write(
                    lambda s: lose_attempt(
                        s,
                        job_id=req.job_id,
                        attempt=req.attempt,
                        cause=LossCause.LAUNCH_FAILED,
                        detail=detail,
                        max_infra_retries=int(self.settings.max_infra_retries),
                    )
                )
            return
        report.started.append(req.submission_id)
        self._observe(
            self.db.write(
                lambda s: record_phase(s, job_id=req.job_id, attempt=req.attempt, phase="launched")
            )
        )

    def _observe(self, mark: PhaseMark | None) -> None:
        if mark is not None and self._on_phase is not None:
            self._on_phase(mark)
