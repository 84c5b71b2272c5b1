"""An object's manifest (``storage.manifest``) lists files with the table a checkpoint's
(``trainer_core.manifest``) is built with, so one verifier reads both; its digest is the
SHA-256 of the bytes stored; publishing writes the manifest last and the same bytes twice
store one object."""

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


def test_the_file_table_lists_size_hash_and_blocks(tmp_path: Path) -> None:
    """One table for objects and checkpoints: a small file is its size and SHA-256, a file past
    one block (or exactly two) also lists each block's SHA-256."""
    root = _folder(tmp_path)
    table = object_file_table(root)
    assert ckpt.file_table(root) == table
    sha = lambda data: hashlib.sha256(data).hexdigest()  # noqa: E731
    assert table["small.txt"] == {"size": 5, "sha256": sha(b"hello")}
    assert table["empty.bin"] == {"size": 0, "sha256": sha(b"")}
    big = bytes(range(256)) * (ckpt.BLOCK_SIZE // 256 + 3)
    assert table["sub/big.bin"] == {
        "size": len(big),
        "sha256": sha(big),
        "block_size": ckpt.BLOCK_SIZE,
        "blocks": [sha(big[: ckpt.BLOCK_SIZE]), sha(big[ckpt.BLOCK_SIZE :])],
    }
    edge = b"\1" * ckpt.BLOCK_SIZE
    assert table["sub/edge.bin"]["blocks"] == [sha(edge), sha(edge)]
    small = object_file_table(root, block_size=2)
    assert small["small.txt"]["blocks"] == [sha(b"he"), sha(b"ll"), sha(b"o")]


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
