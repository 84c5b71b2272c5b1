"""The scheduler: a loop that places queued jobs on the launcher and keeps active ones honest.

``Scheduler(settings, db, launcher)``; ``start()`` runs ``reconcile_on_start`` and then
``tick()`` every ``settings.scheduler_interval_s`` in a daemon thread; ``stop()`` ends it.
``tick()`` is synchronous and unit-tested with ``InMemoryLauncher``. One tick:

1. Reap: attempts whose lease expired on the database clock are stopped on the launcher and
   marked lost (``service.states.mark_attempt_lost``: requeue as attempt + 1 resuming from
   the newest verified checkpoint, or ``retries_exhausted``). An attempt whose driver Ray has
   not started yet (``pending``) cannot have heartbeated: its lease is renewed instead.
2. Sweep active jobs against the launcher (``service.reconcile.sweep_active``): finish
   cancels whose Ray job stopped, stop cancelling ones, lose attempts whose driver ended
   without a final report.
3. Place: order queued jobs by policy (``service.queue.order_queue``: priority, then submit
   time; gang placement per node), against what is free now, then claim each job that
   starts with the compare-and-set ``claim_job`` and submit it (``<job id>-<attempt>``).
   A job that cannot fit the cluster even when it is empty (the cluster shrank) waits with
   that reason and blocks nobody.

Free resources: Ray's per-node free CPUs/GPUs count placement-group reservations as used,
but a job that was just claimed has no placement group yet (its driver is still starting).
So the scheduler also packs every active job onto the node totals itself and takes, per
node, the smaller of the two free figures: a just-claimed job is never double-booked.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.auth import hash_token, new_token
from service.db.engine import Database
from service.db.models import Job, Team
from service.errors import IllegalTransition, StaleAttempt
from service.launcher import ClusterResources, Launcher, LaunchRequest, LaunchState
from service.queue import (
    NodeFree,
    QueueDecision,
    QueueEntry,
    TeamQuota,
    TeamUsage,
    order_queue,
    place_gang,
)
from service.reconcile import lose_attempt, reconcile_on_start, sweep_active
from service.states import (
    ACTIVE_STATES,
    JobStatus,
    claim_job,
    expired_attempts,
    fence_attempt,
    mark_attempt_lost,
)

__all__ = ["Scheduler", "TickReport", "effective_free", "never_fits_reason"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TickReport:
    """What one tick did (for tests and logs)."""

    reaped: list[str] = field(default_factory=list)
    swept: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)  # submission ids
    waiting: dict[str, str] = field(default_factory=dict)  # job id -> reason
    errors: list[str] = field(default_factory=list)


def _entry(job: Job) -> QueueEntry:
    return QueueEntry(
        job_id=job.id,
        team=job.team,
        priority=job.priority,
        created_at=job.created_at,
        num_workers=job.num_workers,
        cpus_per_worker=job.cpus_per_worker,
        gpus_per_worker=job.gpus_per_worker,
    )


def effective_free(cluster: ClusterResources, active: Sequence[QueueEntry]) -> list[NodeFree]:
    """Per alive node: min(Ray's free, totals minus our own packing of the active jobs). Pure."""
    alive = [n for n in cluster.nodes if n.alive]
    sim = [NodeFree(node_id=n.node_id, cpus=n.total_cpus, gpus=n.total_gpus) for n in alive]
    for entry in active:
        placement = place_gang(entry, sim)
        if placement is None:  # more is active than fits (the cluster shrank): trust Ray's view
            continue
        used = {nid: placement.count(nid) for nid in placement}
        sim = [
            NodeFree(
                node_id=n.node_id,
                cpus=n.cpus - used.get(n.node_id, 0) * entry.cpus_per_worker,
                gpus=n.gpus - used.get(n.node_id, 0) * entry.gpus_per_worker,
            )
            for n in sim
        ]
    sim_by_id = {n.node_id: n for n in sim}
    return [
        NodeFree(
            node_id=n.node_id,
            cpus=min(n.free_cpus, sim_by_id[n.node_id].cpus),
            gpus=min(n.free_gpus, sim_by_id[n.node_id].gpus),
        )
        for n in alive
    ]


def never_fits_reason(entry: QueueEntry, cluster: ClusterResources) -> str | None:
    """Why ``entry`` could not start even on the whole cluster empty, or None. Pure."""
    totals = [
        NodeFree(node_id=n.node_id, cpus=n.total_cpus, gpus=n.total_gpus)
        for n in cluster.nodes
        if n.alive
    ]
    if place_gang(entry, totals) is not None:
        return None
    return (
        f"cannot fit the cluster as it is now: needs {entry.num_workers} x "
        f"({entry.cpus_per_worker:g} CPU, {entry.gpus_per_worker:g} GPU) at once; the cluster "
        f"has {len(totals)} node(s) with {cluster.total_cpus:g} CPUs and "
        f"{cluster.total_gpus:g} GPUs in all"
    )


@dataclass(frozen=True, kw_only=True)
class _Snapshot:
    queued: list[QueueEntry]
    active: list[QueueEntry]
    usage: dict[str, TeamUsage]
    quotas: dict[str, TeamQuota]
    reasons: dict[str, str | None]


def _snapshot(session: Session) -> _Snapshot:
    jobs = session.execute(
        select(Job).where(Job.status.in_([str(JobStatus.QUEUED), *(str(s) for s in ACTIVE_STATES)]))
    ).scalars()
    queued, active, reasons = [], [], {}
    usage: dict[str, TeamUsage] = {}
    for job in jobs:
        entry = _entry(job)
        if job.status == JobStatus.QUEUED:
            queued.append(entry)
            reasons[job.id] = job.pending_reason
            continue
        active.append(entry)
        u = usage.get(job.team, TeamUsage())
        usage[job.team] = TeamUsage(
            running_jobs=u.running_jobs + 1, cpus=u.cpus + entry.cpus, gpus=u.gpus + entry.gpus
        )
    quotas = {
        t.name: TeamQuota(
            max_gpus=t.max_gpus, max_cpus=t.max_cpus, max_running_jobs=t.max_running_jobs
        )
        for t in session.execute(select(Team)).scalars()
    }
    active.sort(key=lambda e: e.job_id)
    return _Snapshot(queued=queued, active=active, usage=usage, quotas=quotas, reasons=reasons)


def _set_reasons(session: Session, reasons: dict[str, str]) -> None:
    for job_id, reason in reasons.items():
        job = session.get(Job, job_id)
        if job is not None and job.status == JobStatus.QUEUED and job.pending_reason != reason:
            job.pending_reason = reason


class Scheduler:
    """See the module docstring. Thread-safe ``tick`` (one at a time, under a lock)."""

    def __init__(self, settings: Any, db: Database, launcher: Launcher) -> None:
        self.settings = settings
        self.db = db
        self.launcher = launcher
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- loop -------------------------------------------------------------------------
    def start(self) -> None:
        """Reconcile with the launcher, then tick in a background thread."""
        reconcile_on_start(self.db, self.launcher, self.settings)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="shunter-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        interval = float(self.settings.scheduler_interval_s)
        while not self._stop.wait(interval):
            try:
                self.tick()
            except Exception:  # one bad tick must not end scheduling
                log.exception("scheduler tick failed")

    # -- one tick -----------------------------------------------------------------------
    def tick(self) -> TickReport:
        with self._lock:
            report = TickReport()
            self._reap(report)
            max_retries = int(self.settings.max_infra_retries)
            swept = sweep_active(self.db, self.launcher, max_infra_retries=max_retries)
            report.swept = {k: str(v) for k, v in swept.items()}
            self._place(report)
            return report

    def _reap(self, report: TickReport) -> None:
        for attempt in self.db.read(expired_attempts):
            if self._still_launching(attempt.job_id, attempt.number, attempt.submission_id):
                continue
            # Lose it in the database first (conditional on the lease still being expired):
            # a driver that heartbeated meanwhile must not be stopped.
            if self._lose_expired(attempt.id) is None:
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

    def _lose_expired(self, attempt_id: int) -> Job | None:
        retries = int(self.settings.max_infra_retries)
        return self.db.write(
            lambda s: mark_attempt_lost(s, attempt_id=attempt_id, max_infra_retries=retries)
        )

    def _place(self, report: TickReport) -> None:
        snap = self.db.read(_snapshot)
        if not snap.queued:
            return
        try:
            cluster = self.launcher.cluster()
        except Exception as e:  # Ray unreachable: leave the queue as it is
            report.errors.append(f"cluster: {e}")
            return
        fits, reasons = [], {}
        for entry in snap.queued:
            why = never_fits_reason(entry, cluster)
            if why is None:
                fits.append(entry)
            else:
                reasons[entry.job_id] = why
        decisions = order_queue(
            fits, effective_free(cluster, snap.active), usage=snap.usage, quotas=snap.quotas
        )
        for d in decisions:
            if d.start_now:
                self._start(d, report)
            elif d.reason is not None:
                reasons[d.entry.job_id] = d.reason
        changed = {k: v for k, v in reasons.items() if snap.reasons.get(k) != v}
        if changed:
            self.db.write(lambda s: _set_reasons(s, changed))
        report.waiting = reasons

    def _start(self, d: QueueDecision, report: TickReport) -> None:
        token = new_token()
        lease = float(self.settings.lease_seconds)
        attempt = self.db.write(
            lambda s: claim_job(
                s, job_id=d.entry.job_id, token_hash=hash_token(token), lease_seconds=lease
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
            reason = f"launch failed: {e}"
            log.warning("submit %s failed: %s", req.submission_id, e)
            report.errors.append(f"submit {req.submission_id}: {e}")
            with contextlib.suppress(IllegalTransition):
                self.db.write(
                    lambda s: lose_attempt(
                        s,
                        job_id=req.job_id,
                        attempt=req.attempt,
                        reason=reason,
                        max_infra_retries=int(self.settings.max_infra_retries),
                    )
                )
            return
        report.started.append(req.submission_id)
