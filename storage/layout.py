"""Where a job's files live in its storage (a shared path or ``s3://bucket/prefix``).

::

    <SHUNTER_STORAGE>/<job output dir>/           the job's run directory (Ray Train's run dir)
        checkpoint-<step>/                        one checkpoint: every rank's part, merged
            manifest.json                         size + SHA-256 of every file and of each
                                                  4 MiB block of a larger one (written last)
            ...                                   the engine's files (DCP shards, ZeRO states)
        checkpoint-<step>/hf/, hf.json            the step's model, made on its first download
        final/                                    the finished model (HF layout)
        shunter_result.json                       rank 0's result (final model dir, steps)
    <SHUNTER_STORAGE>/objects/<sha256>/            one immutable team object (dataset or model)
        manifest.json                             written last (trainer_core.manifest format);
                                                  <sha256> = SHA-256 of the canonical manifest
        <relative paths as uploaded>              a dataset's file(s) or an HF model folder
    <SHUNTER_STORAGE>/.cache/tokenized/<key>/     tokenised data shared by jobs (manifest last)

On object storage each rank trains into a node-local staging directory
(``worker.staging.stage_dir``) and Ray Train uploads each worker's part into
``checkpoint-<step>``; a checkpoint is registered only once every part and the manifest are
in the bucket and verify. Both sides use these names: the workers write them, the service
lists, prunes and downloads them.
"""

from __future__ import annotations

from pathlib import PurePosixPath

__all__ = [
    "CHECKPOINT_MODEL_DIR",
    "CHECKPOINT_MODEL_FILES",
    "CHECKPOINT_MODEL_MARK",
    "CHECKPOINT_PREFIX",
    "OBJECT_PREFIX",
    "TOKENIZED_PREFIX",
    "checkpoint_name",
    "checkpoint_step",
    "object_dir",
]

CHECKPOINT_PREFIX = "checkpoint-"
# A step checkpoint's model, made when it is first downloaded (service.jobs.checkpoint_models):
# ``checkpoint-<step>/hf/`` and its commit mark ``checkpoint-<step>/hf.json``. Neither is a
# resume input, so a resume download skips both.
CHECKPOINT_MODEL_DIR = "hf"
CHECKPOINT_MODEL_MARK = "hf.json"
CHECKPOINT_MODEL_FILES = (CHECKPOINT_MODEL_DIR, CHECKPOINT_MODEL_MARK)
# Team objects (datasets, base models), content-addressed by their manifest's SHA-256, and
# the tokenised datasets every job with the same key shares. Both relative to the storage root.
OBJECT_PREFIX = "objects/"
TOKENIZED_PREFIX = ".cache/tokenized/"


def checkpoint_name(step: int) -> str:
    """The directory name of step ``step``'s checkpoint."""
    return f"{CHECKPOINT_PREFIX}{step}"


def checkpoint_step(path: str | None) -> int:
    """The step of a ``checkpoint-<step>`` path (a URI or a local path); 0 for none."""
    if not path:
        return 0
    name = PurePosixPath(path.rstrip("/")).name
    tail = name.removeprefix(CHECKPOINT_PREFIX)
    return int(tail) if name.startswith(CHECKPOINT_PREFIX) and tail.isdigit() else 0


def object_dir(digest: str) -> str:
    """The directory of the object whose manifest hashes to ``digest``, under the storage root."""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"not a sha256 hex digest: {digest!r}")
    return f"{OBJECT_PREFIX}{digest}"
