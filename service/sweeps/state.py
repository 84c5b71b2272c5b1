"""A sweep as the controller reads it (``load_state``), and the writes that stop a pruned
trial (``stop_pruned``). The rows are the only state: see ``service.sweeps.study``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.tables import Job, Sweep, SweepTrial
from service.jobs.checkpoint_now import request_preemption
from service.jobs.states import JobStatus, transition
from service.sweeps.queries import objective_values
from service.sweeps.study import TrialView
from service.sweeps.submit import sweep_spec
from shunter.jobspec.sweep import SweepSpec, objective_metric
from shunter.jobspec.vocab import EventType

__all__ = ["SweepState", "load_state", "params_sha256", "prune_detail", "stop_pruned"]

_PRUNABLE_NOW = frozenset({JobStatus.QUEUED, JobStatus.PAUSED})


def params_sha256(params: dict[str, Any]) -> str:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class SweepState:
    sweep: Sweep
    spec: SweepSpec
    eval_steps: int
    trials: list[TrialView]
    jobs: dict[int, str]  # trial number -> job id
    shas: set[str]


def prune_detail(spec: SweepSpec, step: int, value: float | None) -> str:
    return (
        f"pruned by the sweep's {spec.pruner} pruner at step {step} "
        f"({objective_metric(spec.objective)} = {value})"
    )


def stop_pruned(session: Session, *, job_id: str, detail: str) -> bool:
    """Stop a pruned trial: at its next step boundary if it runs, at once if it waits."""
    status = JobStatus(session.execute(select(Job.status).where(Job.id == job_id)).scalar_one())
    if status in _PRUNABLE_NOW:
        transition(
            session,
            job_id=job_id,
            to=JobStatus.PRUNED,
            expect_from=set(_PRUNABLE_NOW),
            event_type=EventType.PRUNED,
            message=detail,
            values={"pending_reason": None, "queue_position": None},
        )
        return True
    return request_preemption(session, job_id=job_id, cause="prune", detail=detail)


def load_state(session: Session, sweep_id: str) -> SweepState | None:
    sweep = session.get(Sweep, sweep_id)
    if sweep is None or sweep.status != "running":
        return None
    spec = sweep_spec(sweep.definition)
    rows = session.execute(
        select(SweepTrial, Job.status)
        .join(Job, Job.id == SweepTrial.job_id)
        .where(SweepTrial.sweep_id == sweep_id)
        .order_by(SweepTrial.number)
    ).all()
    jobs = {t.number: t.job_id for t, _ in rows}
    values = objective_values(
        session, job_ids=list(jobs.values()), metric=objective_metric(spec.objective)
    )
    trials = [
        TrialView(
            number=t.number,
            status=status,
            params=t.params,
            optuna_attrs=t.optuna_attrs,
            values=values[t.job_id],
            checked_step=t.checked_step,
        )
        for t, status in rows
    ]
    return SweepState(
        sweep=sweep,
        spec=spec,
        eval_steps=int(sweep.definition.get("eval_steps") or 1),
        trials=trials,
        jobs=jobs,
        shas={t.params_sha256 for t, _ in rows},
    )
