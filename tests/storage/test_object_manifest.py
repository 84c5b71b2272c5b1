"""An object's manifest (``storage.manifest``) lists files exactly as a checkpoint's
(``trainer_core.manifest``) does, so one verifier reads both; its digest is the SHA-256 of the
bytes stored; publishing writes the manifest last and the same bytes twice store one object."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import storage
from storage.manifest import (
    MANIFEST,
    manifest_bytes,
    manifest_digest,
    object_file_table,
    publish_object,
)
from trainer_core import manifest as ckpt


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "obj"
    (root / "sub").mkdir(parents=True)
    (root / "small.txt").write_bytes(b"hello")
    (root / "empty.bin").write_bytes(b"")
    # Past one 4 MiB block, and exactly on a block boundary: both get per-block hashes.
    (root / "sub" / "big.bin").write_bytes(bytes(range(256)) * (ckpt.BLOCK_SIZE // 256 + 3))
    (root / "sub" / "edge.bin").write_bytes(b"\1" * (2 * ckpt.BLOCK_SIZE))
    return root


def test_the_file_table_is_the_checkpoint_manifests(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    assert object_file_table(root) == ckpt.file_table(root)
    assert (
        object_file_table(root)["sub/big.bin"]["blocks"][0]
        == hashlib.sha256(
            (bytes(range(256)) * (ckpt.BLOCK_SIZE // 256 + 3))[: ckpt.BLOCK_SIZE]
        ).hexdigest()
    )


def test_publish_writes_a_verifiable_object_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _folder(tmp_path)
    store = str(tmp_path / "store")
    digest, files = publish_object(root, store)
    target = Path(store) / storage.object_dir(digest)
    data = (target / MANIFEST).read_bytes()
    assert manifest_digest(data) == digest and data == manifest_bytes(files)
    assert ckpt.parse_manifest(data) == files and ckpt.verify_checkpoint(target) is None
    assert json.loads(data) == {"files": files}

    writes: list[str] = []
    monkeypatch.setattr(storage.manifest, "upload_dir", lambda *a: writes.append("upload"))
    assert publish_object(root, store)[0] == digest and writes == []  # already there
