"""The scheduler: a loop that places queued jobs on the launcher and keeps active ones honest.

``Scheduler(settings, db, launcher)``; ``start()`` reconciles (if this process leads) and then
runs ``tick()`` every ``settings.scheduler_interval_s`` in a daemon thread; ``stop()`` ends it
and gives up the lease. ``tick()`` is synchronous and unit-tested with ``InMemoryLauncher``.
One tick:

0. Lead: renew or take the scheduler lease (``scheduler.leader``); a follower does nothing.
   A process that has just taken over first reconciles with its launcher.
1. Reap: attempts whose lease expired on the database clock are marked lost
   (``service.jobs.loss.lose_attempt``, cause ``LEASE_EXPIRED``: requeue as attempt + 1
   resuming from the newest verified checkpoint, or ``retries_exhausted``), then stopped on
   the launcher. An attempt whose driver Ray has not started yet (``pending``) cannot have
   heartbeated: its lease is renewed instead.
2. Sweep active jobs against the launcher (``service.jobs.reconcile.sweep_active``): finish
   cancels whose Ray job stopped, stop cancelling ones, lose attempts whose driver ended
   without a final report; stop preemption victims that did not checkpoint in time.
3. Place: one snapshot (``scheduler.snapshot``) -> ``policy.plan`` (priority class, weighted
   fair share, EASY reservation, gang placement; ``docs/scheduling.md``) -> ask the victims
   to checkpoint now (``scheduler.record.preempt``), claim each job that starts with the
   compare-and-set ``claim_job`` under the leader's fence and submit it
   (``<job id>-<attempt>``); then store every queued job's position, reason and ETA and
   every running job's expected end.

Free resources: Ray's per-node free CPUs/GPUs count placement-group reservations as used,
but a job that was just claimed has no placement group yet (its driver is still starting).
So the scheduler also packs every active job onto the node totals itself and takes, per
node, the smaller of the two free figures: a just-claimed job is never double-booked.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from service.accounts.auth import hash_token, new_token
from service.db.engine import Database
from service.db.models import Job
from service.errors import IllegalTransition, StaleAttempt
from service.jobs.loss import LossCause, lose_attempt
from service.jobs.preemption import sweep_overdue
from service.jobs.reconcile import reconcile_on_start, sweep_active
from service.jobs.states import (
    claim_job,
    expired_attempts,
    fence_attempt,
)
from service.launch import ClusterResources, Launcher, LaunchRequest, LaunchState
from service.scheduler import owed, record
from service.scheduler.leader import LeaderLease
from service.scheduler.policy import capacity
from service.scheduler.policy.eta import estimate_starts
from service.scheduler.policy.plan import NodeFree, PolicyConfig, QueueDecision, QueueEntry, plan
from service.scheduler.snapshot import build_snapshot

__all__ = ["Scheduler", "TickReport", "effective_free", "never_fits_reason"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TickStats:
    """Counters of this process's ticks (exported by ``http.scheduling_metrics``)."""

    ticks: int = 0
    reservations: int = 0  # ticks whose plan held a reservation
    last_tick_s: float = 0.0


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
    leader: bool = True  # False: another process holds the scheduler lease; nothing was done


def effective_free(cluster: ClusterResources, active: Sequence[QueueEntry]) -> list[NodeFree]:
    """``policy.capacity.free_now`` over the launcher's view. Pure."""
    return capacity.free_now(cluster.nodes, active)


def never_fits_reason(entry: QueueEntry, cluster: ClusterResources) -> str | None:
    """``policy.capacity.never_fits_reason`` over the launcher's view. Pure."""
    return capacity.never_fits_reason(entry, cluster.nodes)


class Scheduler:
    """See the module docstring. Thread-safe ``tick`` (one at a time, under a lock)."""

    def __init__(self, settings: Any, db: Database, launcher: Launcher) -> None:
        self.settings = settings
        self.db = db
        self.launcher = launcher
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Only the leader ticks; claims are fenced by its epoch (service.scheduler.leader).
        self.lease = LeaderLease(db, lease_s=float(settings.scheduler_lease_s))
        self.stats = TickStats()
        self._reconciled = False

    # -- loop -------------------------------------------------------------------------
    def start(self) -> None:
        """Reconcile with the launcher (if this process leads), then tick in a thread."""
        if self.lease.acquire():
            self._reconcile()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="shunter-scheduler", daemon=True)
        self._thread.start()

    def _reconcile(self) -> None:
        """Only a leader reconciles: a follower's launcher does not know the leader's jobs."""
        reconcile_on_start(self.db, self.launcher, self.settings)
        self._reconciled = True

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        with contextlib.suppress(Exception):  # best effort: the lease expires anyway
            self.lease.release()

    def _run(self) -> None:
        interval = float(self.settings.scheduler_interval_s)
        while not self._stop.wait(interval):
            try:
                self.tick()
            except Exception:  # one bad tick must not end scheduling
                log.exception("scheduler tick failed")

    # -- one tick -----------------------------------------------------------------------
    def tick(self) -> TickReport:
        t0 = time.monotonic()
        try:
            return self._tick()
        finally:
            self.stats.ticks += 1
            self.stats.last_tick_s = time.monotonic() - t0

    def _tick(self) -> TickReport:
        with self._lock:
            report = TickReport()
            if not self.lease.acquire():  # another process leads: it does all the work
                self._reconciled = False  # on taking over, first reconcile what it launched
                report.leader = False
                return report
            if not self._reconciled:
                self._reconcile()
            self._reap(report)
            max_retries = int(self.settings.max_infra_retries)
            swept = sweep_active(self.db, self.launcher, max_infra_retries=max_retries)
            report.swept = {k: str(v) for k, v in swept.items()}
            timeout = float(self.settings.preempt_checkpoint_timeout_s)
            report.preempt_timeouts = sweep_overdue(self.db, self.launcher, timeout_s=timeout)
            self._place(report)
            return report

    def _reap(self, report: TickReport) -> None:
        for attempt in self.db.read(expired_attempts):
            if self._still_launching(attempt.job_id, attempt.number, attempt.submission_id):
                continue
            # Lose it in the database first (conditional on the lease still being expired):
            # a driver that heartbeated meanwhile must not be stopped.
            if self._lose_expired(attempt.job_id, attempt.number) is None:
                continue
            report.reaped.append(attempt.submission_id)
            try:
                self.launcher.stop(attempt.submission_id)  # the old driver must not go on
            except Exception as e:  # it is fenced anyway: its next write gets 409
                report.errors.append(f"stop {attempt.submission_id}: {e}")

    def _still_launching(self, job_id: str, number: int, submission_id: str) -> bool:
        """Ray has not started the driver yet (runtime env, a slow node): it cannot have
        heartbeated, so its lease is renewed rather than lost. Bounded by Ray, which fails a
        job whose driver never starts (RAY_JOB_START_TIMEOUT_SECONDS)."""
        try:
            pending = self.launcher.status(submission_id).state == LaunchState.PENDING
        except Exception:
            return False
        if pending:
            lease = float(self.settings.lease_seconds)
            with contextlib.suppress(StaleAttempt):
                self.db.write(
                    lambda s: fence_attempt(s, job_id=job_id, attempt=number, lease_seconds=lease)
                )
        return pending

    def _lose_expired(self, job_id: str, number: int) -> Job | None:
        retries = int(self.settings.max_infra_retries)
        return self.db.write(
            lambda s: lose_attempt(
                s,
                job_id=job_id,
                attempt=number,
                cause=LossCause.LEASE_EXPIRED,
                max_infra_retries=retries,
            )
        )

    def _place(self, report: TickReport) -> None:
        """Snapshot -> ``policy.plan`` -> preempt, claim and submit; store the queue's
        positions, reasons and ETAs (``scheduler.record``)."""
        try:
            cluster = self.launcher.cluster()
        except Exception as e:  # Ray unreachable: leave the queue as it is
            report.errors.append(f"cluster: {e}")
            return
        half_life = float(self.settings.fairshare_half_life_s)
        snap = self.db.read(lambda s: build_snapshot(s, cluster=cluster, half_life_s=half_life))
        if not snap.queued and not snap.active:
            return
        cfg = PolicyConfig.named(
            "fair",
            grace_s=float(self.settings.fairshare_grace_s),
            min_runtime_s=float(self.settings.preempt_min_runtime_s),
        )
        p = plan(snap, cfg)
        self.db.write(
            lambda s: (
                owed.advance(s, snap=snap, half_life_s=half_life) if self.lease.fence(s) else None
            )
        )
        if p.reservation is not None:
            self.stats.reservations += 1
        for v in p.preemptions:
            if self.db.write(functools.partial(record.preempt, p=v, fence=self.lease.fence)):
                report.preempted.append(v.victim.job_id)
        for d in p.starts:
            self._start(d, report)
        etas = estimate_starts(snap, cfg) if snap.queued else {}
        reasons = {d.entry.job_id: d.reason for d in p.decisions if d.reason is not None}
        self.db.write(
            lambda s: record.store_queue(
                s, plan=p, reasons=reasons, starts=etas, active=snap.active
            )
        )
        report.waiting = reasons

    def _start(self, d: QueueDecision, report: TickReport) -> None:
        token = new_token()
        lease = float(self.settings.lease_seconds)
        attempt = self.db.write(
            lambda s: (
                claim_job(
                    s, job_id=d.entry.job_id, token_hash=hash_token(token), lease_seconds=lease
                )
                if self.lease.fence(s)  # a deposed leader claims nothing
                else None
            )
        )
        if attempt is None:  # cancelled or claimed by another scheduler meanwhile
            return
        req = LaunchRequest(
            submission_id=attempt.submission_id,
            job_id=d.entry.job_id,
            attempt=attempt.number,
            api_url=str(self.settings.public_url),
            attempt_token=token,
            num_workers=d.entry.num_workers,
            cpus_per_worker=d.entry.cpus_per_worker,
            gpus_per_worker=d.entry.gpus_per_worker,
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
