"""Checkpoints: write, publish atomically, verify, pick for resume, prune; the final model.

Layout of ``<output_dir>/checkpoint-<step>/``::

    <engine.save() output>      model + optimizer (+ grad scaler); sharded backends use DCP
    scheduler.pt                LR scheduler state (rank 0)
    trainer_state.json          step, data position (epoch, batch), best metric, early-stop
                                counter, world size (rank 0)
    rng-rank<r>.pt              python / numpy / torch / cuda RNG + collator generator, per rank
    manifest.json               {relative path: {size, sha256[, blocks]}} of every other file
                                (``trainer_core.manifest``); LAST

Publication: everything is written under ``.tmp-checkpoint-<step>``, rank 0 writes the
manifest last and renames the directory to ``checkpoint-<step>`` (one atomic rename on a
POSIX filesystem). A directory without a manifest, or whose files do not match it, is not a
checkpoint: ``latest_verified`` skips it with a warning and takes the next newest.

No shared filesystem is assumed. ``output_dir`` is the same path on every rank, but it may
be node-local (object storage: ``worker.staging``), so ranks on other nodes write into
directories rank 0 cannot see. Each save finds out which ranks share a directory (every
rank drops a ``.rank-<r>`` marker, and the lowest rank whose marker a rank sees is its
directory's *leader*). Each leader hashes the files in its own directory and the lists are
gathered to rank 0, whose manifest names every rank's files. Each leader publishes its
own directory, so on every node ``checkpoint-<step>`` holds that node's part. Only the
union of the parts (what Ray Train's per-node upload makes in the bucket) verifies: a
node's part alone, or a bucket missing one node's part, does not. A resume from the bucket
reads through ``trainer_core.fetch``: each rank fetches what it reads, checked as it arrives.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from trainer_core.engine import Engine
from trainer_core.fetch import CheckpointFiles, OnDisk
from trainer_core.manifest import MANIFEST, file_table, verify_checkpoint, write_manifest

__all__ = [
    "MANIFEST",
    "latest_verified",
    "load_checkpoint",
    "prune_checkpoints",
    "save_checkpoint",
    "verify_checkpoint",
]

log = logging.getLogger(__name__)
_STEP_DIR = re.compile(r"^checkpoint-(\d+)$")
_OLD_STEP_DIR = re.compile(r"^\.old-checkpoint-(\d+)$")
# output_dir -> whether this rank led its directory at the last save (it prunes it too).
_LEADS: dict[Path, bool] = {}


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


# ---------------------------------------------------------------- save


def save_checkpoint(
    output_dir: Path,
    step: int,
    engine: Engine,
    *,
    scheduler: Any,
    trainer_state: dict[str, Any],
    generator: torch.Generator | None = None,
) -> Path:
    """Write and publish ``checkpoint-<step>``; every rank calls it; returns the final path."""
    rank = _rank()
    tmp = output_dir / f".tmp-checkpoint-{step}"
    final = output_dir / f"checkpoint-{step}"
    leader = _directory_leader(output_dir, tmp, rank)
    engine.save(tmp)
    torch.save(_rng_state(generator), tmp / f"rng-rank{rank}.pt")
    if rank == 0:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=1))
    _barrier()  # every rank's files are on disk before the manifest describes them
    mine: dict[str, dict[str, Any]] = {}
    if leader:
        _fsync_tree(tmp)  # the data is on disk before the manifest vouches for it
        mine = file_table(tmp)
    tables = _gather(mine)
    if rank == 0:
        files: dict[str, dict[str, Any]] = {}
        for table in tables:
            files.update(table)
        write_manifest(tmp, files)
    if leader:
        _fsync_dir(tmp)
        _publish(tmp, final)
    _barrier()
    return final


def _directory_leader(output_dir: Path, tmp: Path, rank: int) -> bool:
    """Create ``tmp`` on every node; whether this rank is its directory's leader (the lowest
    rank that sees the same ``tmp``: the others on its node, or all ranks on shared disk)."""
    if _world_size() == 1:
        shutil.rmtree(tmp, ignore_errors=True)  # leftovers of a crash mid-save
        tmp.mkdir(parents=True)
        _LEADS[output_dir] = True
        return True
    shutil.rmtree(tmp, ignore_errors=True)  # leftovers of a crash mid-save, on every node
    _barrier()
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / f".rank-{rank}").touch()
    _barrier()
    seen = sorted(int(p.name[6:]) for p in tmp.glob(".rank-*") if p.name[6:].isdigit())
    _barrier()  # all ranks have looked before the markers go
    (tmp / f".rank-{rank}").unlink()
    lead = bool(seen) and seen[0] == rank
    _LEADS[output_dir] = lead
    return lead


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _gather(table: dict[str, dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    if _world_size() == 1:
        return [table]
    out: list[Any] = [None] * _world_size()
    dist.all_gather_object(out, table)
    return [t for t in out if t]


def _publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``. A re-save of a published step (a resumed run) first moves
    the old one aside to ``.old-checkpoint-<step>`` and deletes it only after the new one is
    in place: a crash at any point leaves a complete checkpoint of that step on disk
    (``_step_dirs`` falls back to the ``.old-`` copy when ``checkpoint-<step>`` is missing)."""
    parent = final.parent
    old = parent / f".old-{final.name}"
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        _fsync_dir(parent)
    os.replace(tmp, final)
    _fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)


def _fsync_tree(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        elif path.is_dir():
            _fsync_dir(path)


def _rng_state(generator: torch.Generator | None) -> dict[str, Any]:
    # Only tensors and plain Python values, so it loads with torch.load(weights_only=True).
    state = np.random.get_state(legacy=True)
    assert isinstance(state, tuple)  # the legacy form: (name, keys, pos, has_gauss, cached)
    name, keys, pos, has_gauss, cached = state
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "collator": generator.get_state() if generator is not None else None,
    }


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- verify + pick


def _step_dirs(output_dir: Path) -> list[tuple[int, Path]]:
    if not output_dir.is_dir():
        return []
    found = {int(m.group(1)): p for p in output_dir.iterdir() if (m := _STEP_DIR.match(p.name))}
    for p in output_dir.iterdir():  # a re-save that crashed between its two renames
        if (m := _OLD_STEP_DIR.match(p.name)) and int(m.group(1)) not in found:
            found[int(m.group(1))] = p
    return sorted(found.items())


def latest_verified(
    output_dir: Path, files_for: Callable[[Path], CheckpointFiles | None] | None = None
) -> Path | None:
    """The newest ``checkpoint-<step>`` whose manifest verifies; corrupt ones are skipped.
    ``files_for`` (the reporter's ``checkpoint_files``): a checkpoint this node holds only
    part of is asked of the copy it names instead of hashed here."""
    for _, path in reversed(_step_dirs(output_dir)):
        files = files_for(path) if files_for is not None else None
        problem = verify_checkpoint(path) if files is None else files.problem()
        if problem is None:
            return path
        log.warning("skipping checkpoint %s: %s", path, problem)
    return None


def prune_checkpoints(output_dir: Path, limit: int | None, keep: Path | None = None) -> None:
    """Delete all but the newest ``limit`` checkpoints, always keeping ``keep`` (the best).
    Each directory's leader prunes its own copy (every node's part, not only rank 0's)."""
    if limit is None or not _LEADS.get(output_dir, _rank() == 0):
        return
    dirs = [p for _, p in _step_dirs(output_dir)]
    keep_set = set(dirs[-limit:]) if limit > 0 else set()
    if keep is not None:
        keep_set.add(keep)
    for path in dirs:
        if path not in keep_set:
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- load


def load_checkpoint(
    directory: Path,
    engine: Engine,
    *,
    scheduler: Any,
    generator: torch.Generator | None = None,
    files: CheckpointFiles | None = None,
) -> dict[str, Any]:
    """Restore engine, scheduler and this rank's RNG; return the saved trainer state.

    ``files``: how to read a checkpoint that is not all on this node (object storage:
    ``directory`` holds its manifest, and each file this rank reads is fetched and checked
    against it as it is read; ``trainer_core.fetch``). Without it the checkpoint is on local
    disk and every file is hashed before anything is read. Either way a tampered or torn
    checkpoint raises ``ValueError``. Every ``torch.load`` is ``weights_only=True``."""
    source = files if files is not None else OnDisk(directory)
    problem = source.problem()
    if problem is not None:
        raise ValueError(f"checkpoint {directory} failed verification: {problem}")
    engine.load(directory, files=files)
    scheduler_file = source.fetch("scheduler.pt")
    scheduler.load_state_dict(torch.load(scheduler_file, weights_only=True))
    try:
        rank_file = source.fetch(f"rng-rank{_rank()}.pt")
    except FileNotFoundError:
        # World size grew since the save: a new rank starts from rank 0's streams.
        log.warning("rng-rank%d.pt missing; using rank 0's RNG state", _rank())
        rank_file = source.fetch("rng-rank0.pt")
    rng = torch.load(rank_file, weights_only=True)
    random.setstate(rng["python"])
    name, keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    if generator is not None and rng["collator"] is not None:
        generator.set_state(rng["collator"])
    state: dict[str, Any] = json.loads(source.fetch("trainer_state.json").read_text())
    return state
