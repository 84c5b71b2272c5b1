"""``save_total_limit`` in the job's storage: the checkpoints the API lists are the ones kept.

trainer_core prunes each node's copy as Hugging Face's Trainer does (the newest
``save_total_limit`` checkpoints and, with ``load_best_model_at_end``, the best). On a shared
filesystem that copy is the only one; on object storage every checkpoint Ray Train uploaded
stays in the bucket until the job is deleted, unless the service prunes it. After each
registered checkpoint the service keeps the same set among the job's verified checkpoints
(``kept``), deletes the other rows first, so nothing is offered that is about to go, then
their objects. A crash between the two leaves only orphaned objects, which the job's
deletion removes. A URI that a kept row still names is never deleted (a resumed attempt
saves its steps under the same names). On a local filesystem trainer_core's pruning is the
authority: only the rows whose directory it already removed go.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

import storage
from service.db.tables import Checkpoint, Job
from shunter.jobspec.rules import default_greater_is_better

__all__ = ["best_checkpoint", "best_metric", "delete_stored", "kept", "prune_checkpoints"]

log = logging.getLogger(__name__)


def best_metric(training: dict[str, Any]) -> tuple[str, bool]:
    """The eval metric ``load_best_model_at_end`` ranks by, and whether greater is better."""
    name = training.get("metric_for_best_model") or "loss"
    metric = name if name.startswith("eval_") else f"eval_{name}"
    greater = training.get("greater_is_better")
    return metric, default_greater_is_better(metric) if greater is None else bool(greater)


def best_checkpoint(training: dict[str, Any], rows: Sequence[Checkpoint]) -> Checkpoint | None:
    """The best of ``rows`` by that metric (the earlier step on a tie); None if none has it."""
    metric, greater = best_metric(training)
    scored = [c for c in rows if isinstance((c.metrics or {}).get(metric), int | float)]
    if not scored:
        return None
    return (max if greater else min)(scored, key=lambda c: (c.metrics[metric], -c.step))


def kept(training: dict[str, Any], rows: Sequence[Checkpoint]) -> list[Checkpoint]:
    """The rows ``save_total_limit`` keeps: all without a limit, else the newest ``limit``
    verified ones (by step, then attempt), the best when ``load_best_model_at_end``, and every
    unverified row newer than the oldest of those (a later save may still verify)."""
    limit = training.get("save_total_limit")
    if limit is None:
        return list(rows)
    verified = sorted((c for c in rows if c.verified), key=lambda c: (c.step, c.attempt))
    keep = verified[-int(limit) :] if limit > 0 else []
    if training.get("load_best_model_at_end"):
        best = best_checkpoint(training, verified)
        if best is not None and best not in keep:
            keep.append(best)
    floor = min((c.step for c in keep), default=-1)
    keep += [c for c in rows if not c.verified and c.step > floor]
    return keep


def prune_checkpoints(session: Session, *, job_id: str) -> list[str]:
    """Drop the rows of the job's pruned checkpoints (committed by the caller's transaction);
    return the URIs to delete from object storage once that has committed."""
    job = session.get(Job, job_id)
    if job is None:
        return []
    training = (job.spec or {}).get("training") or {}
    rows = list(session.execute(select(Checkpoint).where(Checkpoint.job_id == job_id)).scalars())
    keep = kept(training, rows)
    keep_ids = {c.id for c in keep}
    keep_uris = {c.uri for c in keep}
    gone = [c for c in rows if c.id not in keep_ids]
    if not gone:
        return []
    remote = [c for c in gone if storage.is_remote(c.uri)]
    # Local: trainer_core pruned these itself; a row goes only once its directory has.
    drop = remote + [c for c in gone if not storage.is_remote(c.uri) and not storage.exists(c.uri)]
    if drop:
        session.execute(delete(Checkpoint).where(Checkpoint.id.in_([c.id for c in drop])))
    return sorted({c.uri for c in remote} - keep_uris)


def delete_stored(uris: Sequence[str]) -> None:
    """Delete pruned checkpoints from object storage; a failure is logged, not raised (the
    job's deletion removes what is left)."""
    for uri in uris:
        try:
            storage.delete_tree(uri)
        except OSError as exc:
            log.warning("pruned checkpoint %s not deleted: %s", uri, exc)
