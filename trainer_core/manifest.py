"""Checkpoint manifests: ``manifest.json`` lists every other file with its size and SHA-256.

A file larger than one block (``BLOCK_SIZE``, 4 MiB) also lists the SHA-256 of each block, so a
reader that needs only part of it (a rank reading its slices of another rank's DCP shard, on
object storage: ``worker.node_cache``) can fetch and check just those blocks::

    {"files": {"__0_0.distcp": {"size": 9437184, "sha256": "...",
                                "block_size": 4194304, "blocks": ["...", "...", "..."]},
               "trainer_state.json": {"size": 312, "sha256": "..."}, ...}}

The per-file table is ``storage.manifest``'s (team objects use the same format). Standard
library only (``storage`` imports no third-party package at import time), so a process that
only checks checkpoints (the Ray Train controller's ``ApiCallback``) does not import torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from storage.manifest import BLOCK_SIZE, MANIFEST
from storage.manifest import object_file_table as file_table

_CHUNK = 1024 * 1024

__all__ = [
    "BLOCK_SIZE",
    "MANIFEST",
    "blocks_of",
    "file_table",
    "parse_manifest",
    "verify_checkpoint",
    "write_manifest",
]


def write_manifest(directory: Path, files: dict[str, dict[str, Any]] | None = None) -> None:
    """Write ``manifest.json`` listing ``files`` (default: ``file_table(directory)``; a
    multi-node checkpoint passes the union of every node's table)."""
    manifest = file_table(directory) if files is None else files
    tmp = directory / (MANIFEST + ".tmp")
    with open(tmp, "w") as fh:
        json.dump({"files": manifest}, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / MANIFEST)


def parse_manifest(data: bytes | str) -> dict[str, dict[str, Any]]:
    """The ``files`` table of a manifest's text; ``ValueError`` when it is not one."""
    try:
        files = json.loads(data)["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable manifest: {exc}") from exc
    if not isinstance(files, dict):
        raise ValueError("unreadable manifest: 'files' is not a table")
    return files


def blocks_of(meta: dict[str, Any]) -> tuple[int, list[str]]:
    """``(block size, SHA-256 of each block)`` of one file's entry; a file listed without
    blocks (small, or written before blocks existed) is one block: the whole file."""
    if "blocks" in meta:
        return int(meta["block_size"]), list(meta["blocks"])
    return max(int(meta["size"]), 1), [str(meta["sha256"])]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checkpoint(directory: Path) -> str | None:
    """``None`` when every file in the manifest exists with its size and SHA-256; else why not."""
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        return "no manifest.json (incomplete write)"
    try:
        files = parse_manifest(manifest_path.read_text())
    except ValueError as exc:
        return str(exc)
    for rel, meta in files.items():
        path = directory / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != meta["size"]:
            return f"{rel} has {path.stat().st_size} bytes, manifest says {meta['size']}"
        if _sha256(path) != meta["sha256"]:
            return f"{rel} does not match its SHA-256"
    return None
