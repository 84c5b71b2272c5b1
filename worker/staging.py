"""Node-local staging for jobs on object storage (``SHUNTER_STORAGE=s3://...``).

trainer_core reads and writes checkpoints as directories, so on object storage each worker
trains into a staging directory on its own node (``stage_dir``: the same path on every
node), Ray Train uploads each checkpoint from there into the bucket, and a checkpoint to
resume from is downloaded into it first (``localize``). On each node the local rank 0
downloads and the node's other ranks wait for its marker: one download per node, and every
rank of every node finds the files at the same path (rank 0 picks the resume point and the
others load the path it names).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from service import storage

__all__ = ["localize", "stage_dir"]


def stage_dir(job_id: str, attempt: int) -> Path:
    """This attempt's staging directory (node-local; fresh for every attempt)."""
    return Path(tempfile.gettempdir()) / "shunter-stage" / job_id / f"attempt-{attempt}"


def localize(
    uri: str, into: Path, *, local_rank: int, timeout_s: float = 3600.0, poll_s: float = 0.5
) -> Path:
    """A local copy of the checkpoint directory ``uri`` at ``into/<its name>``.

    ``uri`` that is already a local path is returned as it is. Raises ``TimeoutError`` when
    this node's downloader has not finished within ``timeout_s``, ``FileNotFoundError`` when
    nothing is stored under ``uri``.
    """
    if not storage.is_remote(uri):
        return Path(uri)
    target = into / uri.rstrip("/").rsplit("/", 1)[-1]
    done = target.with_name(target.name + ".fetched")
    if local_rank == 0 and not done.exists():
        shutil.rmtree(target, ignore_errors=True)  # a download cut short by a crash
        storage.download_dir(uri, target)
        done.touch()
    deadline = time.monotonic() + timeout_s
    while not done.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{uri} was not downloaded to {target} in {timeout_s:.0f}s")
        time.sleep(poll_s)
    return target
