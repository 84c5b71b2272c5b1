"""Uploaded files (OpenAI's ``/v1/files``): validate, store under storage, list, delete.

A file belongs to its team (another team's file is ``NotFound``). Only ``purpose:
fine-tune`` is accepted; its content must be JSONL in the chat format, one
``{"messages": [{"role", "content"}, ...]}`` object per line with at least one assistant
message. Every problem is reported with its line number, and nothing is stored unless the
whole file is valid. A file is a view over the team's datasets (``service.objects``): its
bytes are a dataset object in the store (local or ``s3://``) whose id the ``files`` row keeps
in ``path``, so a fine-tuning job names it as ``data.train.dataset`` and reads it through the
same node cache as any dataset. Files stored before that keep a local path.
"""

from __future__ import annotations

import json
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_writer, visible
from service.db.engine import Database
from service.db.paging import page_after
from service.db.rows import from_row, unix_seconds
from service.db.tables import File, FineTuningJob
from service.errors import Unprocessable
from service.objects.checks import ObjectFacts
from service.objects.store import add_object, collect_garbage, hide_object
from storage.manifest import publish_object

__all__ = [
    "ROLES",
    "FileInfo",
    "create_file",
    "delete_file",
    "file_path",
    "files_root",
    "get_file",
    "list_files",
    "validate_chat_jsonl",
]

ROLES = ("system", "user", "assistant", "developer", "tool")
_OBJECT_FILE = "data.jsonl"  # a file's one file in its dataset object
_MAX_REPORTED = 5  # line errors in one message


@dataclass(frozen=True, kw_only=True)
class FileInfo:
    id: str
    filename: str
    purpose: str
    bytes: int
    lines: int
    created_at: int  # unix seconds


def files_root(storage: str) -> Path | None:
    """Where files stored before the object store live (a data root for their jobs); None
    on object storage, which never had them."""
    return None if "://" in storage else Path(storage) / "files"


def new_file_id() -> str:
    return f"file-{int(time.time() * 1000):012x}{secrets.token_hex(6)}"


def _line_problem(obj: Any) -> str | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        return 'expected an object {"messages": [...]} (the chat format)'
    messages = obj["messages"]
    if not messages:
        return "messages is empty"
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"messages[{j}].role must be one of {', '.join(ROLES)}"
        if not isinstance(m.get("content"), str):
            return f"messages[{j}].content must be a string"
        if m.get("weight") not in (None, 0, 1):
            return f"messages[{j}].weight must be 0 or 1"
    if not any(m["role"] == "assistant" for m in messages):
        return "no assistant message: nothing to train on"
    return None


def validate_chat_jsonl(content: bytes) -> int:
    """The number of examples, or ``Unprocessable`` naming the bad lines."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unprocessable(f"file: not UTF-8 (byte {exc.start})", detail="invalid_file") from None
    problems: list[str] = []
    count = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        count += 1
        try:
            problem = _line_problem(json.loads(line))
        except json.JSONDecodeError as exc:
            problem = f"not JSON ({exc.msg})"
        if problem is not None:
            problems.append(f"line {number}: {problem}")
    if problems:
        more = len(problems) - _MAX_REPORTED
        tail = f"; and {more} more" if more > 0 else ""
        raise Unprocessable(
            "file: " + "; ".join(problems[:_MAX_REPORTED]) + tail, detail="invalid_file"
        )
    if count == 0:
        raise Unprocessable("file: no examples (empty JSONL)", detail="invalid_file")
    return count


def _info(row: File) -> FileInfo:
    return from_row(FileInfo, row, created_at=unix_seconds(row.created_at))


def create_file(
    db: Database,
    *,
    principal: Principal,
    filename: str,
    purpose: str,
    content: bytes,
    storage: str,
) -> FileInfo:
    require_writer(principal)
    if purpose != "fine-tune":
        raise Unprocessable(f"purpose: only 'fine-tune' is supported, not {purpose!r}")
    lines = validate_chat_jsonl(content)
    file_id = new_file_id()
    name = (filename or "upload.jsonl")[:255]
    with tempfile.TemporaryDirectory(prefix="shunter-file-") as tmp:
        (Path(tmp) / _OBJECT_FILE).write_bytes(content)
        digest, _ = publish_object(Path(tmp), storage)  # files, then the manifest
    facts = ObjectFacts(
        format="jsonl",
        columns=["messages"],
        rows=lines,
        sample=[],
        files=[_OBJECT_FILE],
        bytes=len(content),
    )

    def _write(session: Session) -> FileInfo:
        dataset = add_object(
            session, principal=principal, kind="dataset", name=name, digest=digest, facts=facts
        )
        row = File(
            id=file_id,
            team=principal.team,
            filename=name,
            purpose=purpose,
            bytes=len(content),
            lines=lines,
            path=dataset.id,
            created_by=principal.name,
        )
        session.add(row)
        session.flush()
        return _info(row)

    try:
        return db.write(_write)
    except Exception:
        collect_garbage(db, root=storage, digests=[digest])  # no row names it: its bytes go
        raise


def _visible(session: Session, principal: Principal, file_id: str) -> File:
    return visible(principal, session.get(File, file_id), f"file {file_id}")


def get_file(session: Session, *, principal: Principal, file_id: str) -> FileInfo:
    return _info(_visible(session, principal, file_id))


def file_path(session: Session, *, principal: Principal, file_id: str) -> str:
    """A visible file's dataset id (``ds-...``), or the local path of an older file."""
    return _visible(session, principal, file_id).path


def list_files(
    session: Session,
    *,
    principal: Principal,
    limit: int,
    after: str | None = None,
    purpose: str | None = None,
) -> tuple[list[FileInfo], bool]:
    """The team's files, newest first; ``after``: a file id (the next page is older)."""
    q = select(File).where(File.team == principal.team).order_by(File.id.desc())
    if purpose is not None:
        q = q.where(File.purpose == purpose)
    rows, more = page_after(session, q, File.id, after=after, limit=limit, newest_first=True)
    return [_info(r) for r in rows], more


def delete_file(db: Database, *, principal: Principal, file_id: str, storage: str) -> str:
    """Remove the file and its dataset; the bytes stay while a job that used them exists."""
    require_writer(principal)

    def _delete(session: Session) -> tuple[str | None, str | None]:
        row = _visible(session, principal, file_id)
        session.delete(row)
        if row.path.startswith("ds-"):
            digest = hide_object(session, principal=principal, object_id=row.path, kind="dataset")
            return digest, None
        ft = FineTuningJob
        uses = or_(ft.training_file == file_id, ft.validation_file == file_id)
        used = session.execute(select(ft.job_id).where(uses).limit(1)).first()
        return None, None if used else row.path  # a job's data stays readable (and resumable)

    digest, path = db.write(_delete)
    if digest is not None:
        collect_garbage(db, root=storage, digests=[digest])
    if path is not None:
        Path(path).unlink(missing_ok=True)
    return file_id
