"""Team objects: a dataset or base model stored once under ``objects/<digest>/``.

An upload is written to a local staging folder (streamed, never whole in memory), checked
(``service.objects.checks``), then published with ``storage.manifest.publish_object`` (every
file, then ``manifest.json``: an object is visible only once complete), and only then the row
is written. So a failed check, an interrupted upload or a failed write leaves no dataset
behind. Rows are per team (another team's id is ``NotFound``); two uploads of the same bytes
share one object. ``rm`` hides the row; the bytes go when no live row and no job
(``object_refs``, removed with the job) names the digest (``collect_garbage``).

At submit, ``resolve_inputs`` turns a spec's ``data.*.dataset``, ``data.*.uri`` and
``mdl-``/``s3://`` model references into the job's ``inputs`` (DATA_PLANE: what the driver
localizes), checking the team may read each and that the task's columns are in the data.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import storage
from service.accounts.auth import Principal, require_writer, visible
from service.db.engine import Database
from service.db.paging import page_after
from service.db.rows import from_row, unix_seconds
from service.db.tables import ObjectRef, TeamObject, utcnow_py
from service.errors import Unprocessable
from service.objects.checks import ObjectFacts, dataset_facts, model_facts, spec_format
from shunter.jobspec import FieldError, JobSpec
from shunter.jobspec.columns import task_columns
from shunter.jobspec.safety import config_override_errors
from shunter.jobspec.spec import OBJECT_ID_RE
from shunter.jobspec.topology import tp_model_error
from storage.manifest import MANIFEST, publish_object

__all__ = [
    "ObjectInfo",
    "Upload",
    "add_object",
    "collect_garbage",
    "create_object",
    "delete_object",
    "get_object",
    "hide_object",
    "list_objects",
    "object_uri",
    "record_refs",
    "resolve_inputs",
    "staged",
]

_PREFIX = {"dataset": "ds", "model": "mdl"}
_CHUNK = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class ObjectInfo(ObjectFacts):
    """A team's dataset (``ds-...``) or base model (``mdl-...``) in the store: its facts, and
    where and when it was stored (the API's ``ObjectRead``)."""

    id: str
    kind: str  # dataset | model
    name: str
    digest: str  # SHA-256 of the object's manifest: objects/<digest>/ in storage
    created_at: int  # unix seconds


@dataclass(frozen=True)
class Upload:
    """One uploaded file: its path inside the object ('/'-separated) and a readable stream."""

    path: str
    stream: IO[bytes]


def _info(row: TeamObject) -> ObjectInfo:
    return from_row(ObjectInfo, row, created_at=unix_seconds(row.created_at))


def _new_id(kind: str) -> str:
    return f"{_PREFIX[kind]}-{int(time.time() * 1000):011x}{secrets.token_hex(5)}"


def object_uri(root: str, digest: str) -> str:
    return storage.join(root, storage.object_dir(digest))


def _safe_relpath(raw: str) -> str:
    """An uploaded file's path inside the object: relative, no '..', no empty parts."""
    parts = [p for p in PurePosixPath(raw.replace("\\", "/")).parts if p not in ("", ".")]
    if not parts or raw.startswith("/") or ".." in parts or parts == [MANIFEST]:
        raise Unprocessable(
            f"file: {raw!r} is not a relative file path inside the upload", detail="bad_path"
        )
    return "/".join(parts)


@contextmanager
def staged(uploads: Iterable[Upload], *, max_bytes: int) -> Iterator[Path]:
    """A temporary local folder holding the uploads (removed afterwards, whatever happens)."""
    folder = Path(tempfile.mkdtemp(prefix="shunter-upload-"))
    try:
        total = 0
        for up in uploads:
            target = folder / _safe_relpath(up.path)
            if target.exists():
                raise Unprocessable(f"file: {up.path!r} uploaded twice", detail="bad_path")
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                while chunk := up.stream.read(_CHUNK):
                    total += len(chunk)
                    if total > max_bytes:
                        raise Unprocessable(
                            f"file: the upload is larger than {max_bytes} bytes "
                            "(SHUNTER_MAX_UPLOAD_BYTES)",
                            detail="too_large",
                        )
                    out.write(chunk)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def create_object(
    db: Database,
    *,
    principal: Principal,
    kind: str,
    name: str,
    folder: Path,
    root: str,
    allow_pickle_weights: bool = False,
) -> ObjectInfo:
    """Check the staged ``folder``, publish it under the storage ``root``, write the row."""
    require_writer(principal)
    facts: ObjectFacts = (
        dataset_facts(folder)
        if kind == "dataset"
        else model_facts(folder, allow_pickle_weights=allow_pickle_weights)
    )
    digest, _ = publish_object(folder, root)
    try:
        return db.write(
            lambda session: add_object(
                session, principal=principal, kind=kind, name=name, digest=digest, facts=facts
            )
        )
    except Exception:
        collect_garbage(db, root=root, digests=[digest])  # no row names it: its bytes go
        raise


def add_object(
    session: Session, *, principal: Principal, kind: str, name: str, digest: str, facts: ObjectFacts
) -> ObjectInfo:
    """The row of a published object (``publish_object``), in the caller's transaction."""
    row = TeamObject(
        id=_new_id(kind),
        team=principal.team,
        name=(name or facts.files[0])[:255],
        kind=kind,
        digest=digest,
        created_by=principal.name,
        **{f.name: getattr(facts, f.name) for f in dataclasses.fields(ObjectFacts)},
    )
    session.add(row)
    session.flush()
    return _info(row)


def _visible(session: Session, principal: Principal, object_id: str, kind: str) -> TeamObject:
    row = session.get(TeamObject, object_id)
    live = row is not None and row.kind == kind and row.deleted_at is None
    return visible(principal, row if live else None, f"{kind} {object_id}")


def get_object(session: Session, *, principal: Principal, object_id: str, kind: str) -> ObjectInfo:
    return _info(_visible(session, principal, object_id, kind))


def list_objects(
    session: Session, *, principal: Principal, kind: str, limit: int, after: str | None = None
) -> tuple[list[ObjectInfo], bool]:
    """The team's live objects of ``kind``, newest first (``after``: an id; older follow)."""
    q = (
        select(TeamObject)
        .where(
            TeamObject.team == principal.team,
            TeamObject.kind == kind,
            TeamObject.deleted_at.is_(None),
        )
        .order_by(TeamObject.id.desc())
    )
    rows, more = page_after(session, q, TeamObject.id, after=after, limit=limit, newest_first=True)
    return [_info(r) for r in rows], more


def hide_object(session: Session, *, principal: Principal, object_id: str, kind: str) -> str:
    """Mark the object removed (in the caller's transaction); its digest."""
    row = _visible(session, principal, object_id, kind)
    row.deleted_at = utcnow_py()
    return row.digest


def delete_object(
    db: Database, *, principal: Principal, object_id: str, kind: str, root: str
) -> str:
    """Hide the object; its bytes go now unless a job or another live row still names them."""
    require_writer(principal)
    digest = db.write(
        lambda session: hide_object(session, principal=principal, object_id=object_id, kind=kind)
    )
    collect_garbage(db, root=root, digests=[digest])
    return object_id


def _referenced(session: Session, digest: str) -> bool:
    live = select(func.count()).where(TeamObject.digest == digest, TeamObject.deleted_at.is_(None))
    used = select(func.count()).where(ObjectRef.digest == digest)
    return bool(session.execute(live).scalar_one() or session.execute(used).scalar_one())


def collect_garbage(db: Database, *, root: str, digests: Iterable[str] | None = None) -> list[str]:
    """Delete the bytes (and hidden rows) of every unreferenced digest among ``digests``
    (default: every hidden row's). The digests deleted."""

    def _candidates(session: Session) -> list[str]:
        if digests is not None:
            return sorted(set(digests))
        q = select(TeamObject.digest).where(TeamObject.deleted_at.is_not(None)).distinct()
        return list(session.execute(q).scalars())

    gone: list[str] = []
    for digest in db.read(_candidates):

        def _drop(session: Session, digest: str = digest) -> bool:
            if _referenced(session, digest):
                return False
            for row in session.execute(
                select(TeamObject).where(TeamObject.digest == digest)
            ).scalars():
                session.delete(row)
            return True

        # The row goes in the same transaction that found it unreferenced; the manifest goes
        # first, so a reader racing the delete sees no object rather than a partial one.
        if db.write(_drop):
            uri = object_uri(root, digest)
            if storage.exists(storage.join(uri, MANIFEST)):
                storage.delete_tree(storage.join(uri, MANIFEST))
            storage.delete_tree(uri)
            gone.append(digest)
    return gone


# ------------------------------------------------------------------ submit-time resolution


def _team_object(session: Session, *, team: str, object_id: str, kind: str) -> TeamObject | None:
    row = session.get(TeamObject, object_id)
    if row is None or row.team != team or row.kind != kind or row.deleted_at is not None:
        return None
    return row


def _column_errors(loc: str, spec: JobSpec, columns: list[str], what: str) -> list[FieldError]:
    out = []
    for field, column in task_columns(spec):
        if column not in columns:
            out.append(
                FieldError(
                    f"data.{field}",
                    f"column {column!r} is not in {what} {loc} (its columns: "
                    f"{', '.join(columns) or 'none'}); set data.{field} to one of them",
                )
            )
    return out


def _bucket_error(loc: str, uri: str, buckets: Iterable[str], root: str) -> FieldError | None:
    bucket = uri.removeprefix("s3://").split("/", 1)[0]
    allowed = set(buckets)
    if storage.is_remote(root):
        allowed.add(root.removeprefix("s3://").split("/", 1)[0])
    if bucket in allowed:
        return None
    return FieldError(
        loc,
        f"bucket {bucket!r} is not one this server reads for your team "
        f"({', '.join(sorted(allowed)) or 'none'}; an admin sets SHUNTER_DATA_BUCKETS), or "
        "upload the data with shunter data push and name its ds- id",
    )


def _matching(uri: str) -> list[tuple[str, int]]:
    """``[(uri, size)]`` of the files a ``s3://bucket/key`` or ``.../prefix/*.ext`` names."""
    head, _, tail = uri.rpartition("/")
    if not any(c in tail for c in "*?["):
        try:
            found = storage.list_files(head)
        except (OSError, ValueError):
            return []
        return [(uri, size) for rel, size in found if rel == tail]
    try:
        found = storage.list_files(head)
    except (OSError, ValueError):
        return []
    return [(f"{head}/{rel}", size) for rel, size in found if fnmatch.fnmatch(rel, tail)]


def _parquet_columns(uri: str) -> list[str] | None:
    try:
        import pyarrow.parquet as pq

        fs, path = storage.resolve(uri)
        with fs.open_input_file(path) as fh:
            return list(pq.ParquetFile(fh).schema_arrow.names)
    except Exception:  # unreadable: the worker's read will say why, naming the file
        return None


def resolve_inputs(
    session: Session,
    *,
    team: str,
    spec: JobSpec,
    root: str,
    buckets: Iterable[str] = (),
) -> tuple[dict[str, Any], list[FieldError]]:
    """The job's ``inputs`` and every problem with the objects its spec names."""
    inputs: dict[str, Any] = {}
    errors: list[FieldError] = []
    for name, source in (("train", spec.data.train), ("eval", spec.data.eval)):
        if source is None:
            continue
        if source.dataset is not None:
            loc = f"data.{name}.dataset"
            row = _team_object(session, team=team, object_id=source.dataset, kind="dataset")
            if row is None:
                errors.append(
                    FieldError(
                        loc,
                        f"dataset {source.dataset} not found for team {team!r} "
                        "(shunter data ls lists yours; shunter data push uploads one)",
                    )
                )
                continue
            errors += _column_errors(row.id, spec, list(row.columns), "dataset")
            fmt, delimiter = spec_format(row.format)
            inputs[row.id] = {
                "uri": object_uri(root, row.digest),
                "digest": row.digest,
                "kind": "dataset",
                "format": fmt,
                "delimiter": delimiter,
                # One file: the path a job reads; a folder (shards): the object's directory.
                "file": row.files[0] if len(row.files) == 1 else None,
            }
        elif source.uri is not None:
            loc = f"data.{name}.uri"
            problem = _bucket_error(loc, source.uri, buckets, root)
            if problem is not None:
                errors.append(problem)
                continue
            found = _matching(source.uri)
            if not found:
                errors.append(FieldError(loc, f"no files match {source.uri}"))
                continue
            if source.format == "parquet":
                cols = _parquet_columns(found[0][0])
                if cols is not None:
                    errors += _column_errors(found[0][0], spec, cols, "file")
            inputs[source.uri] = {
                "kind": "uri",
                "format": source.format,
                "delimiter": source.delimiter,
                "files": [{"uri": u, "size": size} for u, size in found],
            }
    for field in ("name_or_path", "tokenizer"):
        value = getattr(spec.model, field)
        loc = f"model.{field}"
        if value is None or value in inputs:
            continue
        if OBJECT_ID_RE.fullmatch(value):
            row = _team_object(session, team=team, object_id=value, kind="model")
            if row is None:
                errors.append(
                    FieldError(
                        loc,
                        f"model {value} not found for team {team!r} "
                        "(shunter models ls lists yours; shunter models push uploads one)",
                    )
                )
                continue
            inputs[row.id] = {
                "uri": object_uri(root, row.digest),
                "digest": row.digest,
                "kind": "model",
            }
            if field == "name_or_path":
                errors += _model_errors(spec, row, loc)
        elif value.startswith("s3://"):
            problem = _bucket_error(loc, value, buckets, root)
            if problem is not None:
                errors.append(problem)
            elif not storage.exists(storage.join(value, "config.json")):
                errors.append(FieldError(loc, f"no config.json under {value} (an HF folder)"))
            else:
                base = value.rstrip("/")
                listed = storage.list_files(base)
                inputs[value] = {
                    "kind": "uri",
                    "uri": base,
                    "files": [{"uri": f"{base}/{rel}", "size": size} for rel, size in listed],
                }
    return inputs, errors


def _model_errors(spec: JobSpec, row: TeamObject, loc: str) -> list[FieldError]:
    """What pass 2 checks of a local model's config, from the uploaded one's ``model_type``
    (kept at upload): a TP plan for its family, overrides that are fields of its config."""
    model_type = row.sample[0].get("model_type") if row.sample else None
    if not isinstance(model_type, str) or spec.model.from_scratch:
        return []
    out = [e for e in [tp_model_error(spec, model_type, loc)] if e is not None]
    overrides = {k: v for k, v in spec.model.config_overrides.items() if k != "model_type"}
    return out + list(config_override_errors(overrides, model_type=model_type))


def record_refs(session: Session, *, job_id: str, inputs: dict[str, Any]) -> None:
    """The job keeps every object it names (``object_refs``) until it is deleted."""
    for key, entry in inputs.items():
        if "digest" in entry:
            session.add(ObjectRef(job_id=job_id, object_id=key, digest=entry["digest"]))
