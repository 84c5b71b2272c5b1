"""A step checkpoint as a downloadable model: consolidated once, cached beside the checkpoint.

A step checkpoint is in the training engine's resume format (DCP shards of every rank, or
DeepSpeed ZeRO partitions, plus optimizer state). ``step_checkpoint`` finds the newest
verified checkpoint row of a step; ``cached_model`` returns the directory of its model in the
final-model layout (``config.json`` + safetensors + tokenizer; a PEFT adapter for LoRA/PEFT
jobs), making it on the first request:

    <checkpoint>/hf/        the model (what the download sends)
    <checkpoint>/hf.json    {"manifest_sha256": ...}: the checkpoint content ``hf/`` was made
                            from; written LAST, so it is the commit mark of the cache

in whatever storage the job uses (a path, or the same ``s3://`` prefix as the checkpoint).
The cache is valid only while ``hf.json`` names the SHA-256 of the checkpoint's current
``manifest.json`` (a step re-saved by a later attempt is consolidated again), and it goes
away with the checkpoint (pruning, retention, job deletion remove the whole directory).

Consolidation runs ``<export_python> -m trainer_core export-checkpoint`` in a child process
(the service never imports torch) on a local copy of the checkpoint, writes to a temporary
directory and then publishes: on a filesystem by renaming it to ``hf/``; on object storage by
uploading ``hf/`` and then writing ``hf.json``. A file lock per checkpoint under
``<home>/exports/locks`` serialises it across threads and API processes on this host, so two
requests never consolidate twice (the second waits and finds the cache); API processes on
other hosts may race, which costs a second consolidation but never a torn read.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import storage
from service.accounts.auth import Principal
from service.db.tables import Checkpoint
from service.errors import Conflict, ExportFailed
from service.jobs.queries import visible_job

__all__ = ["CheckpointSource", "ExportConfig", "cached_model", "export_config", "step_checkpoint"]

log = logging.getLogger(__name__)
CACHE_DIR = storage.CHECKPOINT_MODEL_DIR
CACHE_MARK = storage.CHECKPOINT_MODEL_MARK
_MANIFEST = "manifest.json"  # trainer_core.manifest.MANIFEST


@dataclass(frozen=True, kw_only=True)
class CheckpointSource:
    """What consolidating one checkpoint needs: where it is and the job's spec."""

    job_id: str
    step: int
    uri: str  # the checkpoint directory: a path or an s3:// prefix
    spec: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ExportConfig:
    """How to run the consolidation: the interpreter, its time limit, local scratch space."""

    python: str
    timeout_s: float
    work_dir: Path
    env: dict[str, str]


def step_checkpoint(
    session: Session, *, principal: Principal, job_id: str, step: int, attempt: int | None = None
) -> CheckpointSource:
    """The newest verified checkpoint of ``step`` (a re-saved step: the latest attempt's), or
    that ``attempt``'s; ``Conflict`` naming the steps there are when there is none."""
    job = visible_job(session, principal=principal, job_id=job_id)
    rows = session.execute(
        select(Checkpoint.step, Checkpoint.attempt, Checkpoint.uri)
        .where(Checkpoint.job_id == job.id, Checkpoint.verified.is_(True))
        .order_by(Checkpoint.id.desc())
    ).all()
    for row_step, row_attempt, uri in rows:
        if row_step == step and attempt in (None, row_attempt):
            return CheckpointSource(job_id=job.id, step=step, uri=uri, spec=job.spec)
    steps = sorted({s for s, _, _ in rows})
    which = f"step {step}" if attempt is None else f"step {step} of attempt {attempt}"
    raise Conflict(
        f"job {job_id} has no verified checkpoint at {which}; verified steps: {steps}"
        " (or download 'final' / 'best')"
    )


def cached_model(source: CheckpointSource, config: ExportConfig) -> Path | str:
    """The model directory (path or ``s3://`` URI) of ``source``, consolidated on first use.
    Blocks for the consolidation (call it off the event loop). ``Conflict`` when the
    checkpoint is gone, ``ExportFailed`` when consolidation fails."""
    digest = _manifest_digest(source)
    target = storage.join(source.uri, CACHE_DIR)
    if _cached(source.uri, digest):
        return _as_dir(target)
    with _file_lock(config.work_dir / "locks", source.uri):
        if _cached(source.uri, digest):  # another request made it while we waited
            return _as_dir(target)
        started = time.monotonic()
        _consolidate(source, digest, config)
        took = time.monotonic() - started
        log.info("consolidated %s step %d in %.1fs", source.job_id, source.step, took)
    return _as_dir(target)


def _as_dir(uri: str) -> Path | str:
    return uri if storage.is_remote(uri) else Path(uri)


def _manifest_digest(source: CheckpointSource) -> str:
    try:
        data = storage.read_bytes(storage.join(source.uri, _MANIFEST))
    except (FileNotFoundError, OSError):
        raise Conflict(
            f"job {source.job_id}'s checkpoint at step {source.step} ({source.uri}) is gone"
            " (pruned by save_total_limit, or deleted by retention)"
        ) from None
    return hashlib.sha256(data).hexdigest()


def _cached(uri: str, digest: str) -> bool:
    try:
        mark = json.loads(storage.read_bytes(storage.join(uri, CACHE_MARK)))
    except (FileNotFoundError, OSError, ValueError):
        return False
    return isinstance(mark, dict) and mark.get("manifest_sha256") == digest


@contextmanager
def _file_lock(directory: Path, uri: str) -> Iterator[None]:
    """An exclusive flock per checkpoint: each call opens its own file description, so it
    excludes other threads of this process as well as other processes."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (hashlib.sha256(uri.encode()).hexdigest()[:32] + ".lock")
    with open(path, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _consolidate(source: CheckpointSource, digest: str, config: ExportConfig) -> None:
    config.work_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="export-", dir=config.work_dir))
    try:
        spec_path = scratch / "spec.json"
        spec_path.write_text(json.dumps(source.spec))
        if storage.is_remote(source.uri):
            local = storage.download_dir(
                source.uri, scratch / "checkpoint", skip=storage.CHECKPOINT_MODEL_FILES
            )
            out = scratch / CACHE_DIR
            _run_export(spec_path, local, out, config)
            _publish_remote(out, source.uri, digest)
        else:
            checkpoint = Path(source.uri)
            # Written inside the checkpoint dir, so the publishing rename stays on one device.
            out = Path(tempfile.mkdtemp(prefix=".hf-tmp-", dir=checkpoint))
            try:
                _run_export(spec_path, checkpoint, out, config)
                _publish_local(out, checkpoint, digest)
            finally:
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_export(spec: Path, checkpoint: Path, out: Path, config: ExportConfig) -> None:
    cmd = [config.python, "-m", "trainer_core", "export-checkpoint"]
    cmd += ["--spec", str(spec), "--checkpoint", str(checkpoint), "--out", str(out)]
    try:
        proc = subprocess.run(
            cmd,
            env={**os.environ, **config.env},
            capture_output=True,
            text=True,
            timeout=config.timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ExportFailed(
            f"consolidating {checkpoint.name} took over {config.timeout_s:.0f}s "
            "(SHUNTER_EXPORT_TIMEOUT_SECONDS)"
        ) from None
    except OSError as exc:
        raise ExportFailed(f"cannot run {config.python} (SHUNTER_EXPORT_PYTHON): {exc}") from None
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        if any("No module named 'torch'" in line for line in tail):
            raise ExportFailed(
                f"{config.python} has no torch: point SHUNTER_EXPORT_PYTHON at a Python with "
                "shunter[train] installed to download step checkpoints"
            )
        raise ExportFailed(
            f"consolidating {checkpoint.name} failed ({proc.returncode}): " + " | ".join(tail)
        )


def _mark(digest: str) -> bytes:
    return json.dumps({"manifest_sha256": digest}).encode()


def _publish_local(out: Path, checkpoint: Path, digest: str) -> None:
    mark, target = checkpoint / CACHE_MARK, checkpoint / CACHE_DIR
    mark.unlink(missing_ok=True)  # the old cache stops counting before it is replaced
    if target.exists():
        shutil.rmtree(target)
    out.chmod(0o755)  # mkdtemp made it 0700; the checkpoint's other directories are not
    os.replace(out, target)
    tmp = checkpoint / (CACHE_MARK + ".tmp")
    tmp.write_bytes(_mark(digest))
    os.replace(tmp, mark)


def _publish_remote(out: Path, uri: str, digest: str) -> None:
    target = storage.join(uri, CACHE_DIR)
    mark = storage.join(uri, CACHE_MARK)
    if storage.exists(mark):
        storage.delete_tree(mark)
    if storage.list_files(target):
        storage.delete_tree(target)
    storage.upload_dir(out, target)
    storage.write_bytes(mark, _mark(digest))  # an S3 put is atomic: the commit


def export_config(*, home: Path, python: str, timeout_s: float, hf_home: str) -> ExportConfig:
    """The ``ExportConfig`` for the service's settings."""
    env = {"HF_HOME": hf_home} if hf_home else {}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return ExportConfig(
        python=python or sys.executable,
        timeout_s=timeout_s,
        work_dir=home / "exports",
        env=env,
    )
