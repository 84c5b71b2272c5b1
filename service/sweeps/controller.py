"""The sweep controller: samples trials, asks the pruner, finishes sweeps.

``SweepController(settings, db, launcher)`` runs ``tick()`` every ``sweep_interval_s`` in a
daemon thread of every ``serve``/``scheduler`` process; only the holder of the ``sweeps``
lease (``service.scheduler.leader.LeaderLease``, database clock) acts, and each write checks
the lease's fence in its own transaction, so one process acts at a time. One tick, for each
running sweep, in order:

1. Prune: each unfinished trial whose objective has new evaluations is fed them one step at
   a time (``service.sweeps.study.prune_check``); a pruned trial that is starting/running is
   asked to checkpoint at its next step boundary and stop (``request_preemption``, cause
   ``prune``: the pause mechanism) and then ends ``pruned`` with that checkpoint kept; one
   that is queued or paused (preempted meanwhile) ends ``pruned`` at once.
2. Sample: while fewer than ``max_trials`` trials exist, fewer than ``max_parallel`` are
   unfinished, and the sweep's own budget is not spent: sample (``study.sample``), build the
   trial's spec, run the submit's two validation passes and the team's checks (quota,
   budget: a spent hard budget stops sampling until it renews), then write the job and its
   ``sweep_trials`` row (the parameters) in ONE transaction. A crash before the commit
   samples again (the same, deterministically); after it, the trial exists: never twice,
   never lost. A preempted trial is its job, requeued by the scheduler; never re-sampled.
3. Finish: no trial unfinished and nothing more to sample -> ``succeeded`` (``failed`` if no
   trial succeeded).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, Role
from service.accounts.budgets import usage_seconds
from service.accounts.data_roots import roots_for
from service.db.engine import Database
from service.db.tables import Event, Job, Sweep, SweepTrial, utcnow_py
from service.errors import Forbidden, IllegalTransition, Unprocessable
from service.jobs.submit import SubmitContext, attach_inputs, insert_job, team_checks
from service.launch import Launcher
from service.scheduler.leader import LeaderLease
from service.sweeps.state import (
    SweepState,
    load_state,
    params_sha256,
    prune_detail,
    stop_pruned,
)
from service.sweeps.study import PruneResult, TrialView, prune_check, sample
from service.sweeps.submit import check_trial
from shunter.jobspec.sweep import SweepSpec, trial_document
from shunter.jobspec.vocab import EventType

__all__ = ["SweepController", "SweepTickReport"]

log = logging.getLogger(__name__)
_UNFINISHED = frozenset({"queued", "starting", "running", "cancelling", "paused"})
_RESAMPLE_TRIES = 20  # a sample equal to an earlier trial's is drawn again (new seed)


@dataclass(kw_only=True)
class SweepTickReport:
    leader: bool = True
    sampled: list[str] = field(default_factory=list)  # job ids queued as trials
    pruned: list[str] = field(default_factory=list)  # job ids the pruner stopped
    finished: list[str] = field(default_factory=list)  # sweep ids
    errors: list[str] = field(default_factory=list)


class SweepController:
    """See the module docstring. ``tick`` is synchronous (tests call it directly)."""

    def __init__(self, settings: Any, db: Database, launcher: Launcher) -> None:
        self.settings = settings
        self.db = db
        self.launcher = launcher
        self.lease = LeaderLease(db, lease_s=float(settings.scheduler_lease_s), name="sweeps")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="shunter-sweeps", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        with contextlib.suppress(Exception):  # best effort: the lease expires anyway
            self.lease.release()

    def _run(self) -> None:
        while not self._stop.wait(float(self.settings.sweep_interval_s)):
            try:
                self.tick()
            except Exception:  # one bad tick must not end the sweeps
                log.exception("sweep controller tick failed")

    def tick(self) -> SweepTickReport:
        with self._lock:
            report = SweepTickReport()
            if not self.lease.acquire():
                report.leader = False
                return report
            ids = self.db.read(
                lambda s: list(
                    s.execute(
                        select(Sweep.id).where(Sweep.status == "running").order_by(Sweep.id)
                    ).scalars()
                )
            )
            for sweep_id in ids:
                try:
                    self._advance(sweep_id, report)
                except Exception as e:  # one broken sweep must not stop the others
                    log.exception("sweep %s: tick failed", sweep_id)
                    report.errors.append(f"{sweep_id}: {e}")
            return report

    # -- one sweep ------------------------------------------------------------------------
    def _advance(self, sweep_id: str, report: SweepTickReport) -> None:
        state = self.db.read(lambda s: load_state(s, sweep_id))
        if state is None:
            return
        if state.spec.pruner != "none" and self._prune(state, report):
            state = self.db.read(lambda s: load_state(s, sweep_id))
            if state is None:
                return
        self._sample(state, report)
        self.db.write(lambda s: self._maybe_finish(s, sweep_id, report))

    def _prune(self, state: SweepState, report: SweepTickReport) -> bool:
        """Feed new evaluations to the pruner; True when something was written."""
        wrote = False
        for view in state.trials:
            if view.status not in _UNFINISHED or view.status == "cancelling":
                continue
            if not any(view.checked_step is None or s > view.checked_step for s in view.values):
                continue
            result = prune_check(
                state.spec,
                state.trials,
                view.number,
                seed=state.sweep.seed,
                eval_steps=state.eval_steps,
            )
            job_id = state.jobs[view.number]
            try:
                if self.db.write(
                    functools.partial(self._record, state, view.number, job_id, result)
                ):
                    report.pruned.append(job_id)
            except IllegalTransition as e:  # the trial moved meanwhile; next tick sees it
                log.info("sweep %s trial %s: %s", state.sweep.id, view.number, e)
            wrote = True
        return wrote

    def _record(
        self, state: SweepState, number: int, job_id: str, result: PruneResult, session: Session
    ) -> bool:
        """Store what the pruner saw and wrote; stop the trial if it was pruned."""
        if not self.lease.fence(session):
            return False
        session.execute(
            update(SweepTrial)
            .where(SweepTrial.sweep_id == state.sweep.id, SweepTrial.number == number)
            .values(optuna_attrs=result.optuna_attrs, checked_step=result.checked_step)
        )
        if result.pruned_at is None:
            return False
        view = next(t for t in state.trials if t.number == number)
        value = view.values.get(result.pruned_at)
        detail = prune_detail(state.spec, result.pruned_at, value)
        if not stop_pruned(session, job_id=job_id, detail=detail):
            return False  # it finished (or is being cancelled) meanwhile: nothing to stop
        session.execute(
            update(SweepTrial)
            .where(SweepTrial.sweep_id == state.sweep.id, SweepTrial.number == number)
            .values(pruned_at_step=result.pruned_at)
        )
        return True

    def _sample(self, state: SweepState, report: SweepTickReport) -> None:
        sweep, spec = state.sweep, state.spec
        trials, shas = list(state.trials), set(state.shas)
        checks: SubmitContext | None = None
        while len(trials) < sweep.max_trials:
            live = sum(1 for t in trials if t.status in _UNFINISHED)
            if live >= sweep.max_parallel or self._budget_spent(state, trials):
                return
            # Numbers only grow: a trial whose finished job was deleted leaves a gap.
            number = max((t.number for t in trials), default=-1) + 1
            params, attrs = self._draw(spec, trials, shas, sweep.seed, state.eval_steps)
            if params is None:
                self._set_message(sweep.id, "no new point left to sample: stopped sampling")
                return
            document = trial_document(sweep.base, params)
            document["name"] = f"{sweep.name}-t{number}"[:63]
            checks = checks or self._checks(sweep.team)
            try:
                resolved = check_trial(document, checks).model_dump(mode="json")
            except Unprocessable as e:  # corners passed at submit; this one did not
                self._fail(sweep.id, f"trial {number} {params}: invalid spec: {e.message}")
                return
            insert = functools.partial(
                self._insert_trial, sweep=sweep, number=number, params=params, attrs=attrs,
                resolved=resolved,
            )  # fmt: skip
            try:
                job_id = self.db.write(insert)
            except Forbidden as e:  # the team's hard budget is spent: wait for it to renew
                self._set_message(sweep.id, f"sampling paused: {e.message}")
                return
            except IntegrityError:  # another controller wrote this trial number first
                return
            if job_id is None:
                return
            report.sampled.append(job_id)
            shas.add(params_sha256(params))
            trials.append(
                TrialView(
                    number=number, status="queued", params=params, optuna_attrs=attrs, values={}
                )
            )

    def _draw(
        self,
        spec: SweepSpec,
        trials: list[TrialView],
        shas: set[str],
        seed: int,
        eval_steps: int,
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        for k in range(_RESAMPLE_TRIES):
            params, attrs = sample(spec, trials, seed=seed, draw=k, eval_steps=eval_steps)
            if params_sha256(params) not in shas:
                return params, attrs
        return None, {}

    def _insert_trial(
        self,
        session: Session,
        *,
        sweep: Sweep,
        number: int,
        params: dict[str, Any],
        attrs: dict[str, Any],
        resolved: dict[str, Any],
    ) -> str | None:
        """The trial's job and its parameters, in the caller's one transaction."""
        if not self.lease.fence(session):
            return None
        status = session.execute(select(Sweep.status).where(Sweep.id == sweep.id)).scalar_one()
        if status != "running":  # cancelled meanwhile
            return None
        principal = Principal(
            token_id=f"sweep:{sweep.id}",
            team=sweep.team,
            role=Role.MEMBER,
            name=sweep.created_by or sweep.id,
        )
        resolved, budget_note = team_checks(session, principal=principal, resolved=resolved)
        job = insert_job(
            session, principal=principal, resolved=resolved, storage=self.settings.storage
        )
        attach_inputs(  # the trial keeps the datasets and models it reads (object_refs)
            session,
            job=job,
            storage=self.settings.storage,
            buckets=tuple(self.settings.data_buckets),
        )
        session.add(
            SweepTrial(
                sweep_id=sweep.id,
                number=number,
                job_id=job.id,
                params=params,
                params_sha256=params_sha256(params),
                optuna_attrs=attrs,
            )
        )
        session.add(
            Event(
                job_id=job.id,
                type=EventType.SWEEP_TRIAL,
                message=f"trial {number} of sweep {sweep.id}: {params}",
            )
        )
        if budget_note is not None:
            session.add(Event(job_id=job.id, type=EventType.BUDGET_EXCEEDED, message=budget_note))
        session.execute(
            update(Sweep).where(Sweep.id == sweep.id).values(message=f"sampled trial {number}")
        )
        session.flush()
        return job.id

    def _budget_spent(self, state: SweepState, trials: list[TrialView]) -> bool:
        budget = state.spec.budget
        if budget is None or not state.jobs:
            return False
        gpu_s, cpu_s, _ = self.db.read(
            lambda s: usage_seconds(
                s,
                team=state.sweep.team,
                since=None,
                until=datetime.now(UTC),
                job_ids=list(state.jobs.values()),
            )
        )
        spent = (budget.gpu_hours is not None and gpu_s / 3600 >= budget.gpu_hours) or (
            budget.cpu_hours is not None and cpu_s / 3600 >= budget.cpu_hours
        )
        if spent:
            self._set_message(
                state.sweep.id,
                f"the sweep's budget is spent ({gpu_s / 3600:.4g} GPU-h, {cpu_s / 3600:.4g} "
                "CPU-h held by its trials): no new trials",
            )
        return spent

    def _checks(self, team: str) -> SubmitContext:
        roots = self.db.read(lambda s: roots_for(s, team=team))
        return SubmitContext.from_settings(
            self.settings, team_roots=roots, cluster=self.launcher.cluster()
        )

    def _maybe_finish(self, session: Session, sweep_id: str, report: SweepTickReport) -> None:
        if not self.lease.fence(session):
            return
        sweep = session.get(Sweep, sweep_id)
        if sweep is None or sweep.status != "running":
            return
        statuses = list(
            session.execute(
                select(Job.status)
                .join(SweepTrial, SweepTrial.job_id == Job.id)
                .where(SweepTrial.sweep_id == sweep_id)
            ).scalars()
        )
        if any(s in _UNFINISHED for s in statuses):
            return
        more = len(statuses) < sweep.max_trials and not sweep.message.startswith(
            ("the sweep's budget is spent", "no new point")
        )
        if more:
            return
        ok = "succeeded" in statuses
        sweep.status = "succeeded" if ok else "failed"
        sweep.finished_at = utcnow_py()
        sweep.message = (
            f"done: {len(statuses)} trials"
            if ok
            else f"no trial succeeded ({len(statuses)} trials)"
        )
        report.finished.append(sweep_id)

    def _set_message(self, sweep_id: str, message: str) -> None:
        self.db.write(
            lambda s: s.execute(
                update(Sweep)
                .where(Sweep.id == sweep_id, Sweep.status == "running")
                .values(message=message[:4000])
            )
        )

    def _fail(self, sweep_id: str, message: str) -> None:
        self.db.write(
            lambda s: s.execute(
                update(Sweep)
                .where(Sweep.id == sweep_id, Sweep.status == "running")
                .values(status="failed", message=message[:4000], finished_at=utcnow_py())
            )
        )
