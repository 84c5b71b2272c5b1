"""``model.init_from``: resolve another job's checkpoint into a directory at submit time.

``resolve_init_from(session, team=..., spec=...)`` returns the resolved spec document with
``model.init_from.path`` set to the chosen checkpoint's directory, or raises ``SpecError``
naming ``model.init_from.*``. Rules:

- the source job must exist and belong to the submitting team (another team's job is "not
  found", as everywhere);
- only verified checkpoints count; ``latest`` is the highest step, a number is that step,
  ``best`` is the best value of the source job's ``metric_for_best_model`` (default
  ``eval_loss``; lower is better unless its ``greater_is_better``) among its checkpoints
  that were saved with that metric;
- checkpoints are in the engine's format, so a DeepSpeed checkpoint only feeds a DeepSpeed
  job and the others only non-DeepSpeed ones; ``path`` is the service's to set.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.tables import Checkpoint, Job
from service.jobs.prune import best_checkpoint, best_metric
from shunter.jobspec import FieldError, SpecError

__all__ = ["resolve_init_from"]

_LOC = "model.init_from"


def _fail(field: str, message: str) -> SpecError:
    return SpecError([FieldError(f"{_LOC}.{field}", message)])


def _best(source: Job, rows: list[Checkpoint]) -> Checkpoint:
    training = (source.spec or {}).get("training", {})
    best = best_checkpoint(training, rows)
    if best is None:
        raise _fail(
            "checkpoint",
            f"job {source.id} has no checkpoint saved with {best_metric(training)[0]}; use "
            "latest or a step number",
        )
    return best


def resolve_init_from(session: Session, *, team: str, spec: dict[str, Any]) -> dict[str, Any]:
    init = (spec.get("model") or {}).get("init_from")
    if init is None:
        return spec
    if init.get("path") is not None:
        raise _fail("path", "is set by the service; leave it null")
    source = session.get(Job, init["job"])
    if source is None or source.team != team:
        raise _fail("job", f"job {init['job']} not found in team {team}")
    rows = list(
        session.execute(
            select(Checkpoint).where(Checkpoint.job_id == source.id, Checkpoint.verified.is_(True))
        ).scalars()
    )
    if not rows:
        raise _fail("job", f"job {source.id} has no verified checkpoint yet")
    which = init.get("checkpoint", "latest")
    if which == "latest":
        chosen = max(rows, key=lambda c: (c.step, c.id))
    elif which == "best":
        chosen = _best(source, rows)
    else:
        steps = [c for c in rows if c.step == which]
        if not steps:
            have = ", ".join(str(s) for s in sorted({c.step for c in rows}))
            raise _fail("checkpoint", f"job {source.id} has no checkpoint at step {which}: {have}")
        chosen = max(steps, key=lambda c: c.id)
    theirs = ((source.spec or {}).get("distributed") or {}).get("strategy", "ddp")
    ours = (spec.get("distributed") or {}).get("strategy", "ddp")
    if (theirs == "deepspeed") != (ours == "deepspeed"):
        raise _fail(
            "job",
            f"job {source.id} saved {theirs} checkpoints; they load only into a "
            f"{'deepspeed' if theirs == 'deepspeed' else 'non-deepspeed'} job, not {ours}",
        )
    model = {**spec["model"], "init_from": {**init, "path": chosen.uri}}
    return {**spec, "model": model}
