"""Downloading a job's model: the final (or best) model directory as a tar stream.

What can be downloaded is what the trainer wrote in the Hugging Face layout: the final
model (``config.json``, safetensors weights, tokenizer files; a LoRA job's PEFT adapter,
``adapter_config.json`` + ``adapter_model.safetensors``, unless merged on save). ``best`` is
the final model of a job run with ``load_best_model_at_end`` (which restores the best
checkpoint before saving it). A step number names a verified step checkpoint: it is in the
training engine's resume format, so it is consolidated into the same layout once and cached
beside the checkpoint (``service.jobs.checkpoint_models``). The stream is built file by file
(no temporary archive, no whole file in memory): POSIX tar headers, the bytes, padding to
512, two zero blocks. On object storage (``s3://`` storage) the model is streamed from the
bucket the same way.

Never a truncated tar that looks whole: ``tar_size`` gives the exact length up front (the
route sends it as ``Content-Length``), object reads resume at the range that broke
(``storage.open_read``), and a file that still comes short, or a store that stays away past
``SHUNTER_STORAGE_RETRY_S``, raises mid-stream: the server then aborts the connection before
the closing zero blocks, and the client sees fewer bytes than announced.
"""

from __future__ import annotations

import re
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.orm import Session

import storage
from service.accounts.auth import Principal
from service.db.engine import Database
from service.errors import Conflict
from service.jobs.checkpoint_models import ExportConfig, cached_model, step_checkpoint
from service.jobs.queries import visible_job

__all__ = ["model_dir", "resolve_download", "tar_size", "tar_stream"]

_CHUNK = 1024 * 1024
# A checkpoint by the id the list gives (``step-N@A``: that attempt's), or by step
# (``step-N`` or ``N``: the newest verified one of that step).
_CHECKPOINT = re.compile(r"^(?:step-)?(\d{1,19})(?:@(\d{1,9}))?$")
_BLOCK = 512


def resolve_download(
    db: Database, *, principal: Principal, job_id: str, which: str, export: ExportConfig
) -> Path | str:
    """The model directory to send for ``which``: ``final``, ``best``, a checkpoint's id
    (``step-N@A``) or its step (``N``, ``step-N``): a verified step checkpoint, consolidated
    on first use (this blocks, so call it off the event loop). A path, or an ``s3://`` URI
    on object storage."""
    if (named := _CHECKPOINT.match(which)) is not None:
        step, attempt = int(named[1]), None if named[2] is None else int(named[2])
        source = db.read(
            lambda s: step_checkpoint(
                s, principal=principal, job_id=job_id, step=step, attempt=attempt
            )
        )
        return cached_model(source, export)
    return db.read(lambda s: model_dir(s, principal=principal, job_id=job_id, which=which))


def model_dir(session: Session, *, principal: Principal, job_id: str, which: str) -> Path | str:
    """The directory to send for ``which`` (``final`` or ``best``): a path, or an ``s3://``
    URI on object storage; or ``Conflict`` saying why there is none."""
    job = visible_job(session, principal=principal, job_id=job_id)
    if which not in ("final", "best"):
        raise Conflict(
            f"checkpoint {which!r}: download 'final', 'best' (a job run with "
            "load_best_model_at_end: true), the step number of a verified checkpoint, or "
            "the id the checkpoint list gives it (step-N@A)"
        )
    if which == "best" and not (job.spec.get("training") or {}).get("load_best_model_at_end"):
        raise Conflict(
            f"job {job_id} did not run with load_best_model_at_end, so its final model is "
            "not the best one; download 'final'"
        )
    uri = job.final_model_uri
    if uri is None:
        raise Conflict(f"job {job_id} has no final model (status {job.status})")
    gone = Conflict(f"job {job_id}'s model directory {uri} is gone (deleted by retention?)")
    if storage.is_remote(uri):
        if not storage.list_files(uri):
            raise gone
        return uri
    path = Path(uri)
    if not path.is_dir():
        raise gone
    return path


def _files(directory: Path | str) -> list[tuple[str, int]]:
    """(relative path, size) of each regular file to send, sorted."""
    if isinstance(directory, str) and storage.is_remote(directory):
        return storage.list_files(directory)
    root = Path(directory)
    paths = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    return [(p.relative_to(root).as_posix(), p.stat().st_size) for p in paths]


def _header(name: str, size: int, mtime: float) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, int(mtime), 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


def tar_size(directory: Path | str, prefix: str) -> int:
    """The exact byte length ``tar_stream(directory, prefix)`` yields (for Content-Length)."""
    total = 2 * _BLOCK
    for rel, size in _files(directory):
        total += len(_header(f"{prefix}/{rel}", size, 0)) + size + (-size) % _BLOCK
    return total


def tar_stream(directory: Path | str, prefix: str) -> Iterator[bytes]:
    """An uncompressed tar of ``directory``'s regular files under ``prefix/``; an object-store
    URI is streamed from the bucket object by object. Raises (never ends early) when a file
    cannot be sent whole."""
    remote = isinstance(directory, str) and storage.is_remote(directory)
    for rel, size in _files(directory):
        if remote:
            source, mtime = storage.join(str(directory), rel), time.time()
            chunks = storage.open_read(source)
        else:
            path = Path(directory) / rel
            source, mtime = str(path), path.stat().st_mtime
            chunks = _read_local(path)
        yield _header(f"{prefix}/{rel}", size, mtime)
        sent = 0
        for chunk in chunks:
            sent += len(chunk)
            yield chunk
        if sent != size:  # the file changed under us: a corrupt archive is worse
            raise RuntimeError(f"{source} changed size while being sent ({sent} of {size})")
        if pad := (-sent) % _BLOCK:
            yield b"\0" * pad
    yield b"\0" * (2 * _BLOCK)


def _read_local(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            yield chunk
