"""Reproducing a job: the spec as the user sent it, the record of what ran, and clones.

- ``submitted_form(document)``: the submitted document in the user's own form (relative data
  paths, hub ids, ``init_from`` by job and step, the priority asked for) with every default
  written out (pass 1 and ``fill_defaults``, no pass 2). Stored at submit as
  ``jobs.submitted_spec``; ``GET /v1/jobs/{id}/spec`` returns it and it resubmits as is.
  The service's own facts (``training.output_dir``, the resolved paths, a soft budget's
  ``low``) stay in ``jobs.spec``, the spec that runs.
- ``submit_record(spec)``: what the service knows at submit (``jobs.record``): the code
  version, the seed, and fingerprints of the local data files and model folder. A file's
  sha256 is computed only up to ``HASH_MAX_BYTES`` (a submit must not read gigabytes); a
  larger file gets its size and mtime, so a changed file still shows in ``shunter diff``.
  A hub id is recorded as the id (the hub has no stable digest before download).
- The driver reports, with its ``running`` status, the code and package versions where the
  attempt actually ran (``shunter.provenance``); ``service.jobs.attempts`` stores them in
  the record under ``run``.
- ``clone_document(...)``: a job's submitted form with dotted overrides and, optionally,
  ``model.init_from`` set to one of its checkpoints; the caller submits it like any body.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pydantic
from sqlalchemy.orm import Session

from service.accounts.auth import Principal
from service.db.tables import Job
from service.errors import Unprocessable
from service.jobs.queries import visible_job
from service.schemas.jobs import JobRecordRead
from shunter.jobspec import FieldError, JobSpec, SpecError, fill_defaults, format_spec_errors
from shunter.jobspec.dotted import set_dotted
from shunter.jobspec.spec import DataSource, is_store_ref
from shunter.provenance import code_version

__all__ = [
    "HASH_MAX_BYTES",
    "clone_document",
    "clone_spec",
    "job_record",
    "job_spec",
    "spec_for_resubmit",
    "submit_record",
    "submitted_form",
]

HASH_MAX_BYTES = 16 * 1024 * 1024
_MODEL_FILES_HASHED = ("config.json", "generation_config.json", "tokenizer_config.json")


def submitted_form(document: Any) -> dict[str, Any] | None:
    """The user's document with its defaults written out. Call it on a document that passed
    validation: it runs the models only (0.3 ms; the cross-field rules of pass 1 are 30 times
    that, and already passed); None when the models refuse it."""
    try:
        spec = JobSpec.model_validate(document)
    except pydantic.ValidationError:
        return None
    return fill_defaults(spec).model_dump(mode="json")


def spec_for_resubmit(job: Job) -> dict[str, Any]:
    """The spec a user resubmits: the stored submitted form; for a job stored before it
    existed (or inserted by a sweep or the OpenAI route), the running spec without the
    service's fields (``training.output_dir``, ``model.init_from.path``)."""
    if job.submitted_spec is not None:
        return copy.deepcopy(job.submitted_spec)
    spec = copy.deepcopy(job.spec)
    spec.get("training", {})["output_dir"] = None
    init_from = spec.get("model", {}).get("init_from")
    if isinstance(init_from, dict):
        init_from["path"] = None
    return spec


def _file_fingerprint(path: Path) -> dict[str, Any]:
    st = path.stat()
    out: dict[str, Any] = {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    if st.st_size <= HASH_MAX_BYTES:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        out["sha256"] = digest.hexdigest()
    return out


def _location(value: str | None) -> dict[str, Any] | None:
    """A resolved location: a local file, a local folder (its small config files hashed and
    its other files listed by name and size), or a hub id."""
    if value is None:
        return None
    if is_store_ref(value):  # its digest is in the job's inputs (job_record adds it)
        return {"object": value}
    path = Path(value)
    if not path.is_absolute():
        return {"hub": value}
    try:
        if path.is_file():
            return {"path": value, **_file_fingerprint(path)}
        if path.is_dir():
            files: dict[str, Any] = {}
            for child in sorted(path.iterdir()):
                if not child.is_file():
                    continue
                if child.name in _MODEL_FILES_HASHED:
                    files[child.name] = _file_fingerprint(child)
                else:
                    files[child.name] = {"bytes": child.stat().st_size}
            return {"path": value, "files": files}
    except OSError as e:
        return {"path": value, "error": f"{type(e).__name__}: {e}"[:300]}
    return {"path": value}


def _source(source: DataSource) -> dict[str, Any] | None:
    if source.path is not None:
        return _location(source.path)
    if source.dataset is not None or source.uri is not None:
        return {"object": source.dataset or source.uri}
    return {"hub": source.hub, "config": source.config, "split": source.split}


def submit_record(spec: JobSpec) -> dict[str, Any]:
    """The reproduction record of a checked, resolved spec, as the service sees it at submit."""
    data: dict[str, Any] = {}
    for name, source in (("train", spec.data.train), ("eval", spec.data.eval)):
        if source is None:
            continue
        data[name] = _source(source)
    model = spec.model
    return {
        "code_version": code_version(),
        "seed": spec.training.seed,
        "model": _location(model.name_or_path),
        "tokenizer": _location(model.tokenizer) if model.tokenizer != model.name_or_path else None,
        "data": data,
    }


def clone_document(
    source: dict[str, Any],
    *,
    source_job: str,
    overrides: dict[str, Any],
    from_checkpoint: int | str | None,
) -> dict[str, Any]:
    """``source`` (a submitted form) with each ``dotted.key: value`` set and, with
    ``from_checkpoint``, ``model.init_from`` = that checkpoint of ``source_job`` (weights
    only; ``model.init_from.resume: true`` among the overrides continues the run exactly).
    ``SpecError`` naming the key for an override that walks into a non-mapping."""
    doc = copy.deepcopy(source)
    errors: list[FieldError] = []
    if from_checkpoint is not None:
        doc.setdefault("model", {})["init_from"] = {
            "job": source_job,
            "checkpoint": from_checkpoint,
        }
    for key, value in overrides.items():
        problem = set_dotted(doc, key, value)
        if problem is not None:
            errors.append(FieldError(key or "overrides", problem))
    if errors:
        raise SpecError(errors)
    return doc


def job_spec(session: Session, *, principal: Principal, job_id: str) -> dict[str, Any]:
    """``GET /v1/jobs/{id}/spec``: the spec to resubmit (``spec_for_resubmit``)."""
    return spec_for_resubmit(visible_job(session, principal=principal, job_id=job_id))


def job_record(session: Session, *, principal: Principal, job_id: str) -> JobRecordRead:
    """``GET /v1/jobs/{id}/record``: the record, with the digests of the stored objects the
    job reads (``jobs.inputs``, resolved at submit) under ``inputs``."""
    job = visible_job(session, principal=principal, job_id=job_id)
    if job.record is None:
        return JobRecordRead(job_id=job.id, record=None)
    digests = {ref: (entry or {}).get("digest") for ref, entry in (job.inputs or {}).items()}
    return JobRecordRead(job_id=job.id, record={**job.record, "inputs": digests})


def clone_spec(
    session: Session,
    *,
    principal: Principal,
    job_id: str,
    overrides: dict[str, Any],
    from_checkpoint: int | str | None,
) -> dict[str, Any]:
    """The document a clone submits; 404 for a job the caller cannot see, 422 naming an
    override that cannot be set (the submit that follows validates the rest)."""
    job = visible_job(session, principal=principal, job_id=job_id)
    try:
        return clone_document(
            spec_for_resubmit(job),
            source_job=job.id,
            overrides=overrides,
            from_checkpoint=from_checkpoint,
        )
    except SpecError as exc:
        body = format_spec_errors(exc.errors)
        raise Unprocessable(body["message"], detail=body["detail"]) from None
