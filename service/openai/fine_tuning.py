"""Fine-tuning jobs over our jobs: create (translate + the shared submit path), list, get,
cancel, events, checkpoints, and the model list. Keyword-only, FastAPI-free.

A fine-tuning job is a job with a ``fine_tuning_jobs`` row; visibility is the job's (another
team's is ``NotFound``). ``create_ft_job`` submits through ``service.jobs.submit`` (pass 1
+ pass 2 + quota, so admission is shared) with the uploaded files' directory as one more
data root, then records the OpenAI-side fields.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_writer, visible
from service.db.engine import Database
from service.db.paging import page_after
from service.db.tables import Checkpoint, Event, FineTuningJob, Job
from service.errors import NotFound, Unprocessable
from service.jobs import checkpoint_now, queries
from service.jobs.submit import SubmitContext, submit_job
from service.launch import ClusterResources
from service.openai import translate
from service.openai.catalog import CatalogModel
from service.openai.files import file_path, files_root
from service.schemas.openai import FineTuningJobCreate

__all__ = [
    "cancel_ft_job",
    "create_ft_job",
    "get_ft_job",
    "list_ft_checkpoints",
    "list_ft_events",
    "list_ft_jobs",
    "list_models",
    "pause_ft_job",
    "resume_ft_job",
]


def _catalog_model(catalog: dict[str, CatalogModel], name: str) -> CatalogModel:
    if name not in catalog:
        known = ", ".join(sorted(catalog))
        raise Unprocessable(
            f"model: {name!r} is not in this server's catalog (GET /v1/models); one of: {known}",
            detail=[{"loc": "model", "msg": "unknown model"}],
        )
    return catalog[name]


def _paths(db: Database, principal: Principal, req: FineTuningJobCreate) -> tuple[str, str | None]:
    def read(session: Session) -> tuple[str, str | None]:
        def one(loc: str, file_id: str) -> str:
            try:
                return file_path(session, principal=principal, file_id=file_id)
            except NotFound:
                raise Unprocessable(
                    f"{loc}: file {file_id} not found (upload it with POST /v1/files)",
                    detail=[{"loc": loc, "msg": "file not found"}],
                ) from None

        train = one("training_file", req.training_file)
        valid = one("validation_file", req.validation_file) if req.validation_file else None
        return train, valid

    return db.read(read)


def create_ft_job(
    db: Database,
    *,
    principal: Principal,
    req: FineTuningJobCreate,
    catalog: dict[str, CatalogModel],
    data_roots: list[Path],
    storage: str,
    cluster: ClusterResources | None,
) -> dict[str, Any]:
    require_writer(principal)
    model = _catalog_model(catalog, req.model)
    train_path, valid_path = _paths(db, principal, req)
    old_files = [root] if (root := files_root(storage)) is not None else []
    hp = translate.resolved_hyperparameters(req.given_hyperparameters(), model)
    seed = req.seed if req.seed is not None else secrets.randbelow(2**31)
    spec = translate.job_spec(
        model=model,
        hyperparameters=hp,
        training_path=train_path,
        validation_path=valid_path,
        suffix=req.suffix,
        seed=seed,
    )
    result = submit_job(
        db,
        principal=principal,
        raw=json.dumps(spec).encode(),
        content_type="application/json",
        idempotency_key=None,
        ctx=SubmitContext(data_roots=[*data_roots, *old_files], storage=storage, cluster=cluster),
    )

    def record(session: Session) -> dict[str, Any]:
        ft = FineTuningJob(
            job_id=result.job.id,
            model=req.model,
            training_file=req.training_file,
            validation_file=req.validation_file,
            suffix=req.suffix,
            hyperparameters=hp,
            user_metadata=req.metadata,
            seed=seed,
        )
        session.add(ft)
        session.flush()
        job = session.get(Job, result.job.id)
        assert job is not None
        return translate.ft_job(job, ft)

    return db.write(record)


def _visible(session: Session, principal: Principal, ft_id: str) -> tuple[Job, FineTuningJob]:
    job_id = translate.job_id_of(ft_id)
    ft = session.get(FineTuningJob, job_id) if job_id else None
    job = session.get(Job, job_id) if ft is not None else None
    seen = visible(principal, job, f"fine-tuning job {ft_id}")
    assert ft is not None  # a job is read only for a fine-tuning row
    return seen, ft


def get_ft_job(session: Session, *, principal: Principal, ft_id: str) -> dict[str, Any]:
    return translate.ft_job(*_visible(session, principal, ft_id))


def list_ft_jobs(
    session: Session, *, principal: Principal, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], bool]:
    """The team's fine-tuning jobs, newest first; ``after``: an ``ftjob-`` id."""
    q = (
        select(Job, FineTuningJob)
        .join(FineTuningJob, FineTuningJob.job_id == Job.id)
        .where(Job.team == principal.team)
        .order_by(Job.id.desc())
    )
    before = None if after is None else (translate.job_id_of(after) or "")
    rows, more = page_after(
        session, q, Job.id, after=before, limit=limit, newest_first=True, rows=True
    )
    return [translate.ft_job(j, f) for j, f in rows], more


def cancel_ft_job(
    db: Database, *, principal: Principal, ft_id: str, launcher: Any
) -> dict[str, Any]:
    job, _ = db.read(lambda s: _visible(s, principal, ft_id))
    queries.cancel_job(db, principal=principal, job_id=job.id, launcher=launcher)
    return db.read(lambda s: get_ft_job(s, principal=principal, ft_id=ft_id))


def pause_ft_job(db: Database, *, principal: Principal, ft_id: str) -> dict[str, Any]:
    """Checkpoint at the next step and free the resources (the job becomes ``paused``)."""
    require_writer(principal)
    job, _ = db.read(lambda s: _visible(s, principal, ft_id))
    checkpoint_now.pause_job(db, principal=principal, job_id=job.id)
    return db.read(lambda s: get_ft_job(s, principal=principal, ft_id=ft_id))


def resume_ft_job(db: Database, *, principal: Principal, ft_id: str) -> dict[str, Any]:
    """A paused job goes back to the queue and resumes from its pause checkpoint."""
    require_writer(principal)
    job, _ = db.read(lambda s: _visible(s, principal, ft_id))
    checkpoint_now.resume_paused(db, principal=principal, job_id=job.id)
    return db.read(lambda s: get_ft_job(s, principal=principal, ft_id=ft_id))


def _after_id(value: str | None, prefix: str) -> int | None:
    if value is None:
        return None
    tail = value.removeprefix(prefix)
    if not tail.isdigit():
        raise Unprocessable(f"after: {value!r} is not a {prefix}N id")
    return int(tail)


def list_ft_events(
    session: Session, *, principal: Principal, ft_id: str, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], bool]:
    """Newest first, as OpenAI lists them; ``after``: an ``ftevent-`` id (older ones next)."""
    job, _ = _visible(session, principal, ft_id)
    q = select(Event).where(Event.job_id == job.id).order_by(Event.id.desc())
    before = _after_id(after, "ftevent-")
    rows, more = page_after(session, q, Event.id, after=before, limit=limit, newest_first=True)
    return [translate.ft_event(e) for e in rows], more


def list_ft_checkpoints(
    session: Session, *, principal: Principal, ft_id: str, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], bool]:
    """Verified checkpoints, newest first; ``after``: an ``ftckpt-`` id."""
    job, ft = _visible(session, principal, ft_id)
    q = (
        select(Checkpoint)
        .where(Checkpoint.job_id == job.id, Checkpoint.verified.is_(True))
        .order_by(Checkpoint.id.desc())
    )
    before = _after_id(after, "ftckpt-")
    rows, more = page_after(session, q, Checkpoint.id, after=before, limit=limit, newest_first=True)
    out = [translate.ft_checkpoint(c, base=ft.model, team=job.team, suffix=ft.suffix) for c in rows]
    return out, more


def list_models(
    session: Session, *, principal: Principal, catalog: dict[str, CatalogModel]
) -> list[dict[str, Any]]:
    """The catalog's base models, then the team's succeeded fine-tuned models."""
    out: list[dict[str, Any]] = [
        {"id": m.id, "created": m.created, "owned_by": m.owned_by} for m in catalog.values()
    ]
    rows = session.execute(
        select(Job, FineTuningJob)
        .join(FineTuningJob, FineTuningJob.job_id == Job.id)
        .where(Job.team == principal.team, Job.status == "succeeded")
        .order_by(Job.id)
    ).all()
    for job, ft in rows:
        out.append(
            {
                "id": translate.fine_tuned_model_name(ft.model, job.team, ft.suffix, job.id),
                "created": translate.ft_job(job, ft)["finished_at"] or 0,
                "owned_by": job.team,
            }
        )
    return out
