"""Node-local staging for jobs on object storage (``SHUNTER_STORAGE=s3://...``).

trainer_core reads and writes checkpoints as directories, so on object storage each worker
trains into a staging directory on its own node (``stage_dir``: the same path on every
node) and Ray Train uploads each checkpoint from there into the bucket.

A checkpoint to start from (the resume point, a ``model.init_from`` checkpoint) is not
downloaded whole. ``localize`` makes its node-local view: a directory holding only its
manifest (on each node the local rank 0 fetches it and the node's other ranks wait for its
mark), at the same path on every node (rank 0 picks the resume point and the others load
the path it names). Its other files are fetched as the ranks read them, through the node's
cache (``cached``: a ``worker.node_cache.CachedCheckpoint``, trainer_core's
``CheckpointFiles``), so a node downloads only the bytes its own ranks read, each once.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import storage
from trainer_core.manifest import MANIFEST
from worker.node_cache import CachedCheckpoint, fetch_dir

__all__ = ["cached", "localize", "stage_dir"]

_SOURCE = ".source"  # <checkpoint dir><_SOURCE>: the URI it mirrors, written last


def stage_dir(job_id: str, attempt: int) -> Path:
    """This attempt's staging directory (node-local; fresh for every attempt)."""
    return Path(tempfile.gettempdir()) / "shunter-stage" / job_id / f"attempt-{attempt}"


def localize(
    uri: str, into: Path, *, local_rank: int, timeout_s: float = 3600.0, poll_s: float = 0.5
) -> Path:
    """The node-local view of the checkpoint directory ``uri``: ``into/<its name>``, holding
    its manifest; ``cached`` reads the rest through it.

    ``uri`` that is already a local path is returned as it is. Raises ``TimeoutError`` when
    this node's local rank 0 has not fetched the manifest within ``timeout_s``,
    ``FileNotFoundError`` when ``uri`` has no manifest.
    """
    if not storage.is_remote(uri):
        return Path(uri)
    target = into / uri.rstrip("/").rsplit("/", 1)[-1]
    mark = target.with_name(target.name + _SOURCE)
    if local_rank == 0 and _source(mark) != uri:
        mark.unlink(missing_ok=True)  # another checkpoint of that name, or a crash: redo
        for leftover in (target, fetch_dir(target)):
            shutil.rmtree(leftover, ignore_errors=True)
        target.mkdir(parents=True)
        # Not the step's downloadable model (made on request, beside it): not in the manifest.
        (target / MANIFEST).write_bytes(storage.read_bytes(storage.join(uri, MANIFEST)))
        tmp = mark.with_name(mark.name + ".tmp")
        tmp.write_text(uri)
        tmp.replace(mark)
    deadline = time.monotonic() + timeout_s
    while _source(mark) != uri:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{uri} was not localized to {target} in {timeout_s:.0f}s")
        time.sleep(poll_s)
    return target


def cached(path: Path) -> CachedCheckpoint | None:
    """The cache reading ``path`` from the bucket, if ``localize`` made it; else ``None``
    (a checkpoint on local disk: this attempt's own, or on a shared filesystem)."""
    uri = _source(path.with_name(path.name + _SOURCE))
    return None if uri is None else CachedCheckpoint(uri, path)


def _source(mark: Path) -> str | None:
    try:
        return mark.read_text()
    except FileNotFoundError:
        return None
