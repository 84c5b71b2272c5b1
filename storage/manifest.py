"""The manifest format, one copy for checkpoints (``trainer_core.manifest``) and team objects.

A team object (an uploaded dataset or base model) is stored under ``objects/<digest>/`` with a
``manifest.json`` listing every other file's size and SHA-256 (and, past one 4 MiB block, each
block's SHA-256), exactly as a checkpoint's manifest does, so the node cache verifies both the
same way. The object's ``digest`` is the SHA-256 of the manifest's canonical bytes (sorted
keys, no spaces), which are what ``manifest.json`` holds: a reader checks an object by hashing
the manifest it fetched and comparing with the digest it asked for.

The per-file table (``describe_file``, ``object_file_table``) is written here only: storage
imports nothing of ours, and ``trainer_core.manifest`` builds a checkpoint's table with it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from storage.layout import object_dir
from storage.objects import exists, join, upload_dir, write_bytes

__all__ = [
    "BLOCK_SIZE",
    "MANIFEST",
    "describe_file",
    "manifest_bytes",
    "manifest_digest",
    "object_file_table",
    "publish_object",
]

MANIFEST = "manifest.json"
BLOCK_SIZE = 4 * 1024 * 1024  # bytes per hashed block: the unit of a partial fetch
_CHUNK = 1024 * 1024


def describe_file(path: Path, block_size: int = BLOCK_SIZE) -> dict[str, Any]:
    """``{size, sha256[, block_size, blocks]}`` of one file, in one read."""
    whole = hashlib.sha256()
    blocks: list[str] = []
    size = 0
    with open(path, "rb") as fh:
        while True:
            block = hashlib.sha256()
            got = 0
            while got < block_size and (chunk := fh.read(min(_CHUNK, block_size - got))):
                whole.update(chunk)
                block.update(chunk)
                got += len(chunk)
            if got == 0:
                break
            blocks.append(block.hexdigest())
            size += got
            if got < block_size:
                break
    meta: dict[str, Any] = {"size": size, "sha256": whole.hexdigest()}
    if len(blocks) > 1:
        meta |= {"block_size": block_size, "blocks": blocks}
    return meta


def object_file_table(
    directory: Path, *, block_size: int | None = None
) -> dict[str, dict[str, Any]]:
    """``{relative path: {size, sha256[, block_size, blocks]}}`` of every file under
    ``directory`` but the manifest, by '/'-separated path (``block_size``: default
    ``BLOCK_SIZE``)."""
    block = block_size or BLOCK_SIZE
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    return {p.relative_to(directory).as_posix(): describe_file(p, block) for p in files}


def manifest_bytes(files: dict[str, dict[str, Any]]) -> bytes:
    """The canonical ``manifest.json`` of a file table (what the digest is taken over)."""
    return json.dumps({"files": files}, sort_keys=True, separators=(",", ":")).encode()


def manifest_digest(data: bytes) -> str:
    """An object's digest: the SHA-256 of its manifest's bytes."""
    return hashlib.sha256(data).hexdigest()


def publish_object(local: Path, root: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """Store the files of the local directory ``local`` as an object under the storage root
    ``root`` (a path or ``s3://...``): the files first, ``manifest.json`` last, so a reader
    never sees a partial object. ``(digest, file table)``; an object already there (same
    bytes uploaded before) is not written again."""
    files = object_file_table(local)
    if not files:
        raise ValueError("an object needs at least one file")
    data = manifest_bytes(files)
    digest = manifest_digest(data)
    target = join(root, object_dir(digest))
    if not exists(join(target, MANIFEST)):
        upload_dir(local, target)
        write_bytes(join(target, MANIFEST), data)
    return digest, files
