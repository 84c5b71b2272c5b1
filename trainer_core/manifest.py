"""Checkpoint manifests: ``manifest.json`` lists every other file with its size and SHA-256.

A file larger than one block (``BLOCK_SIZE``, 4 MiB) also lists the SHA-256 of each block, so a
reader that needs only part of it (a rank reading its slices of another rank's DCP shard, on
object storage: ``worker.node_cache``) can fetch and check just those blocks::

    {"files": {"__0_0.distcp": {"size": 9437184, "sha256": "...",
                                "block_size": 4194304, "blocks": ["...", "...", "..."]},
               "trainer_state.json": {"size": 312, "sha256": "..."}, ...}}

Standard library only, so a process that only checks checkpoints (the Ray Train controller's
``ApiCallback``) does not import torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = [
    "BLOCK_SIZE",
    "MANIFEST",
    "blocks_of",
    "file_table",
    "parse_manifest",
    "verify_checkpoint",
    "write_manifest",
]

MANIFEST = "manifest.json"
BLOCK_SIZE = 4 * 1024 * 1024  # bytes per hashed block: the unit of a partial fetch
_CHUNK = 1024 * 1024


def file_table(directory: Path, *, block_size: int | None = None) -> dict[str, dict[str, Any]]:
    """``{relative path: {size, sha256[, block_size, blocks]}}`` of every file under
    ``directory`` but the manifest (``block_size``: default ``BLOCK_SIZE``)."""
    block = block_size or BLOCK_SIZE
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    return {str(p.relative_to(directory)): _describe(p, block) for p in files}


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


def _describe(path: Path, block_size: int) -> dict[str, Any]:
    """Size, SHA-256 and (past one block) per-block SHA-256s, in one read of the file."""
    whole = hashlib.sha256()
    blocks: list[str] = []
    size = 0
    with open(path, "rb") as fh:
        while True:
            block = hashlib.sha256()
            left = block_size
            while left and (chunk := fh.read(min(_CHUNK, left))):
                whole.update(chunk)
                block.update(chunk)
                left -= len(chunk)
            if left == block_size:
                break  # end of file on a block boundary
            blocks.append(block.hexdigest())
            size += block_size - left
            if left:
                break  # a short last block
    meta: dict[str, Any] = {"size": size, "sha256": whole.hexdigest()}
    if len(blocks) > 1:
        meta |= {"block_size": block_size, "blocks": blocks}
    return meta


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
