"""Checkpoint manifests: ``manifest.json`` lists every other file with its size and SHA-256.

Standard library only, so a process that only checks checkpoints (the Ray Train controller's
``ApiCallback``) does not import torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = ["MANIFEST", "verify_checkpoint", "write_manifest"]

MANIFEST = "manifest.json"


def write_manifest(directory: Path) -> None:
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {
        str(p.relative_to(directory)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in files
    }
    tmp = directory / (MANIFEST + ".tmp")
    with open(tmp, "w") as fh:
        json.dump({"files": manifest}, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / MANIFEST)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checkpoint(directory: Path) -> str | None:
    """``None`` when every file in the manifest exists with its size and SHA-256; else why not."""
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        return "no manifest.json (incomplete write)"
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return f"unreadable manifest: {exc}"
    for rel, meta in files.items():
        path = directory / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != meta["size"]:
            return f"{rel} has {path.stat().st_size} bytes, manifest says {meta['size']}"
        if _sha256(path) != meta["sha256"]:
            return f"{rel} does not match its SHA-256"
    return None
