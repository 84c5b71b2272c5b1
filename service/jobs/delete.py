"""Deleting a finished job: its rows (attempts, events, metrics, checkpoints, idempotency
keys, fine-tuning record), then its storage directory, with an ``audit_log`` row.

Contract of ``delete_job``: only a terminal job (succeeded, failed, cancelled) may go; any
other status is 409 (cancel it first). Members of the owning team and admins may delete;
another team's job is 404, a viewer 403. The database part is one transaction that re-checks
the status under the write lock, so a concurrent resume either wins (then 409) or finds the
job gone. Files go afterwards, and only ``<storage>/<job id>`` after symlinks, inside the
storage root; on object storage, every object under the job's prefix ``<storage>/<job id>/``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

import storage as objstore
from service.accounts.auth import Principal, require_writer, visible
from service.db.engine import Database
from service.db.tables import (
    Attempt,
    AuditLog,
    Checkpoint,
    Event,
    FineTuningJob,
    IdempotencyKey,
    Job,
    MetricPoint,
    ObjectRef,
)
from service.errors import Conflict
from service.jobs.states import TERMINAL
from service.objects.store import collect_garbage

__all__ = ["DeleteResult", "delete_job", "job_storage_dir"]


@dataclass(frozen=True, kw_only=True)
class DeleteResult:
    job_id: str
    storage_removed: bool  # False: nothing stored


def job_storage_dir(storage: str, job_id: str) -> Path | None:
    """``<storage>/<job_id>`` when storage is local and it resolves inside storage; else None."""
    if objstore.is_remote(storage):
        return None
    root = os.path.realpath(storage)
    path = os.path.realpath(os.path.join(root, job_id))
    if os.path.dirname(path) != root:  # a symlinked job dir pointing elsewhere stays
        return None
    return Path(path)


def delete_job(
    db: Database, *, principal: Principal, job_id: str, storage: str, actor: str | None = None
) -> DeleteResult:
    """Delete a terminal job's rows and storage; see the module docstring."""
    require_writer(principal)
    digests = db.write(lambda s: _delete_rows(s, principal=principal, job_id=job_id, actor=actor))
    if digests:  # the team objects only this job still kept (removed with data rm)
        collect_garbage(db, root=storage, digests=digests)
    if objstore.is_remote(storage):  # the job's prefix in the bucket (a job id has no '/')
        removed = "/" not in job_id and objstore.delete_tree(objstore.join(storage, job_id))
        return DeleteResult(job_id=job_id, storage_removed=removed)
    target = job_storage_dir(storage, job_id)
    removed = False
    if target is not None and target.is_dir():
        shutil.rmtree(target)
        removed = True
    return DeleteResult(job_id=job_id, storage_removed=removed)


def _delete_rows(
    session: Session, *, principal: Principal, job_id: str, actor: str | None
) -> list[str]:
    job = visible(
        principal,
        session.execute(select(Job).where(Job.id == job_id).with_for_update()).scalar_one_or_none(),
        f"job {job_id}",
    )
    if job.status not in TERMINAL:
        raise Conflict(
            f"job {job_id} is {job.status}; only a finished job (succeeded, failed, cancelled) "
            "can be deleted: cancel it first"
        )
    team, status = job.team, job.status
    refs = select(ObjectRef.digest).where(ObjectRef.job_id == job_id)
    digests = list(session.execute(refs).scalars())
    for model in (
        MetricPoint,
        Event,
        Checkpoint,
        Attempt,
        IdempotencyKey,
        FineTuningJob,
        ObjectRef,
    ):
        session.execute(delete(model).where(model.job_id == job_id))
    session.execute(delete(Job).where(Job.id == job_id))
    session.add(
        AuditLog(
            actor=actor or principal.name,
            actor_team=principal.team,
            action="job.delete",
            target=job_id,
            target_team=team,
            detail=f"status {status}",
        )
    )
    return digests
