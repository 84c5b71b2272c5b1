"""``gc``: delete every finished job past retention (``retention.expired``), each through
``jobs.delete.delete_job`` (rows, storage, one audit row per job), then the bytes of every
removed dataset or model no job uses any more (``objects.store.collect_garbage``: what a
crash between ``rm`` and its collection left). ``dry_run`` lists them and deletes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from service.accounts.auth import Principal, require_admin
from service.db.engine import Database
from service.db.sqltime import as_utc
from service.db.tables import Job
from service.errors import Conflict, NotFound
from service.housekeeping.retention import JobAge, expired
from service.jobs.delete import delete_job
from service.objects.store import collect_garbage

__all__ = ["GcResult", "run_gc"]


@dataclass(frozen=True, kw_only=True)
class GcResult:
    job_ids: list[str]  # past retention (deleted unless dry_run)
    deleted: list[str]
    dry_run: bool


def run_gc(
    db: Database,
    *,
    principal: Principal,
    storage: str,
    older_than: timedelta,
    dry_run: bool,
    now: datetime | None = None,
) -> GcResult:
    require_admin(principal)
    now = now or datetime.now(UTC)
    rows = db.read(
        lambda s: s.execute(
            select(Job.id, Job.status, Job.finished_at).where(Job.finished_at.is_not(None))
        ).all()
    )
    ages = [JobAge(r.id, r.status, as_utc(r.finished_at)) for r in rows]
    ids = expired(ages, now=now, older_than=older_than)
    deleted: list[str] = []
    if not dry_run:
        for job_id in ids:
            try:
                delete_job(db, principal=principal, job_id=job_id, storage=storage, actor="gc")
            except (Conflict, NotFound):
                continue  # resumed or deleted since the read: not ours to take
            deleted.append(job_id)
        collect_garbage(db, root=storage)
    return GcResult(job_ids=ids, deleted=deleted, dry_run=dry_run)
