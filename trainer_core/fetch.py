"""Checkpoints whose files are not all on this node yet (object storage).

A checkpoint to resume from is not downloaded whole. The runner (``worker.staging``) puts its
manifest in a node-local directory and hands trainer_core a ``CheckpointFiles`` for it (the
reporter's ``checkpoint_files``), whose ``fetch`` brings a file, or only some of its bytes,
into that directory just before they are read, checked against the manifest. The loop
fetches what every rank reads (``trainer_state.json``, ``scheduler.pt``, its own
``rng-rank<r>.pt``); the engines fetch what their load reads: DCP the byte ranges its load
plan names, which may lie in other ranks' shards (DCP stores a replicated tensor once, in
whichever rank's file is smallest, and a load at another world size reads slices of any
shard); DeepSpeed the files it opens (its rank's ZeRO partition, the model states). So a
node holds only what its own ranks read, whatever placement wrote the checkpoint.

``OnDisk`` is the same interface for a checkpoint that is all on local disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from trainer_core.manifest import MANIFEST, parse_manifest, verify_checkpoint

__all__ = ["CheckpointFiles", "OnDisk", "Ranges"]

Ranges = Sequence[tuple[int, int]]  # (offset, length) byte ranges of one file


class CheckpointFiles(Protocol):
    """A checkpoint's files, read through its local directory ``path``."""

    path: Path

    def fetch(self, rel: str, ranges: Ranges | None = None) -> Path:
        """The local path of file ``rel`` (relative to the checkpoint) once the bytes a reader
        needs are there and match the manifest: all of them, or those in ``ranges`` (then
        read only there). ``FileNotFoundError`` when the manifest does not list ``rel``,
        ``ValueError`` when the stored bytes do not match it."""
        ...

    def problem(self) -> str | None:
        """Why this is not a checkpoint to load (``verify_checkpoint``'s answer); ``None``
        when it is."""
        ...


class OnDisk:
    """A checkpoint that is all on local disk: ``problem`` hashes every file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fetch(self, rel: str, ranges: Ranges | None = None) -> Path:
        if rel not in parse_manifest((self.path / MANIFEST).read_text()):
            raise FileNotFoundError(f"{rel} is not in {self.path}'s manifest")
        return self.path / rel

    def problem(self) -> str | None:
        return verify_checkpoint(self.path)
