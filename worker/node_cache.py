"""A checkpoint in object storage, read through this node's cache (``CachedCheckpoint``).

``worker.staging.localize`` puts the checkpoint's manifest in a node-local directory; then
trainer_core asks for each file as its ranks read it (``trainer_core.fetch.CheckpointFiles``):
the whole file, or only the byte ranges a DCP load plan names. The unit of a fetch is the
manifest's block (``trainer_core.manifest``: 4 MiB, each with its SHA-256; a small file is one
block): a block is downloaded with one range request, hashed, and marked present only when
its hash is the manifest's, so a corrupt or truncated object fails the rank that reads it
(``ValueError``) and is never cached. A file is written in place, sparse, and read only where
its blocks are marked.

Layout, beside the local directory ``<into>/checkpoint-<step>/``::

    <into>/checkpoint-<step>/               manifest.json, then each file as it is fetched
    <into>/checkpoint-<step>.source         the bucket URI it mirrors (``localize``'s mark)
    <into>/.checkpoint-<step>.fetch/<f>.lock  one advisory lock per file (flock)
    <into>/.checkpoint-<step>.fetch/<f>.have  the indices of its verified blocks

The local ranks of a node share the directory. A file's fetches hold its lock (released by
the kernel if the holder dies), so a block several ranks read is downloaded once per node;
nobody holds a lock while reading.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import storage
from trainer_core.fetch import Ranges
from trainer_core.manifest import MANIFEST, blocks_of, parse_manifest
from worker.file_lock import flocked

__all__ = ["CachedCheckpoint", "fetch_dir"]

_PIECE = 64 * 1024 * 1024  # the most one range request reads (bounds memory per fetch)


def fetch_dir(path: Path) -> Path:
    """Where the locks and block marks of the cached checkpoint ``path`` live."""
    return path.with_name(f".{path.name}.fetch")


class CachedCheckpoint:
    """The checkpoint at ``uri``, read through its node-local directory ``path`` (which holds
    its manifest). ``timeout_s``: the longest a rank waits for another to finish a file."""

    def __init__(self, uri: str, path: Path, *, timeout_s: float = 3600.0) -> None:
        self.uri, self.path, self.timeout_s = uri, path, timeout_s
        self._manifest: dict[str, dict[str, Any]] | None = None

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        """The manifest's table; ``ValueError`` when it is unreadable."""
        if self._manifest is None:
            self._manifest = parse_manifest((self.path / MANIFEST).read_bytes())
        return self._manifest

    def problem(self) -> str | None:
        """The manifest reads and the bucket holds each of its files at its size (one
        listing). The bytes are checked block by block as ranks fetch them."""
        try:
            files = self.files
        except (OSError, ValueError) as exc:
            return str(exc)
        stored = dict(storage.list_files(self.uri))
        for rel, meta in files.items():
            if rel not in stored:
                return f"{rel} is missing"
            if stored[rel] != meta["size"]:
                return f"{rel} has {stored[rel]} bytes, manifest says {meta['size']}"
        return None

    def fetch(self, rel: str, ranges: Ranges | None = None) -> Path:
        """See ``trainer_core.fetch.CheckpointFiles.fetch``."""
        meta = self.files.get(rel)
        if meta is None:
            raise FileNotFoundError(f"{rel} is not in the manifest of {self.uri}")
        dest = _inside(self.path, rel)
        size = int(meta["size"])
        block, hashes = blocks_of(meta)
        want = _blocks(rel, ranges, block, len(hashes), size)
        have = self._state(rel, ".have")
        with _locked(self._state(rel, ".lock"), self.timeout_s):
            missing = sorted(want - _marked(have))
            if missing:
                self._download(rel, dest, size, block, hashes, missing, have)
        return dest

    def fetched(self) -> dict[str, int]:
        """Bytes of each file this node holds, verified (for logs, tests and the bench)."""
        out: dict[str, int] = {}
        for rel, meta in self.files.items():
            have = _marked(self._state(rel, ".have"))
            if have:
                block, _ = blocks_of(meta)
                size = int(meta["size"])
                out[rel] = sum(min(block, size - i * block) for i in have)
        return out

    def _state(self, rel: str, suffix: str) -> Path:
        return fetch_dir(self.path) / (quote(rel, safe="") + suffix)

    def _download(
        self,
        rel: str,
        dest: Path,
        size: int,
        block: int,
        hashes: list[str],
        missing: list[int],
        have: Path,
    ) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(dest, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)  # sparse: only fetched blocks take space
            with storage.open_ranges(storage.join(self.uri, rel)) as stored, open(have, "a") as out:
                if stored.size != size:
                    raise ValueError(
                        f"{self.uri}/{rel} has {stored.size} bytes, manifest says {size}"
                    )
                name = f"{self.uri}/{rel}"
                for first, last in _runs(missing):
                    start, end = first * block, min((last + 1) * block, size)
                    for index in _verified(stored, fd, start, end, block, hashes, name):
                        out.write(f"{index}\n")
                        out.flush()
        finally:
            os.close(fd)


def _verified(
    stored: storage.RangeReader,
    fd: int,
    start: int,
    end: int,
    block: int,
    hashes: list[str],
    name: str,
) -> Iterator[int]:
    """Copy bytes ``start..end`` (whole blocks) of ``stored`` into ``fd``; yield the index of
    each block once its SHA-256 is the manifest's, raise ``ValueError`` at the first that
    is not. Reads at most ``_PIECE`` bytes at a time (a block may be larger: one old-style
    whole-file block)."""
    index = start // block
    digest = hashlib.sha256()
    if start == end:  # an empty file: one empty block
        if digest.hexdigest() != hashes[index]:
            raise ValueError(f"{name}: block {index} does not match its SHA-256")
        yield index
        return
    pos = start
    while pos < end:
        data = stored.read_at(pos, min(_PIECE, end - pos))
        if not data:
            raise ValueError(f"{name} ended at byte {pos}, manifest says more")
        os.pwrite(fd, data, pos)
        view, at = memoryview(data), 0
        while at < len(data):
            block_end = min((index + 1) * block, end)
            take = min(block_end - (pos + at), len(data) - at)
            digest.update(view[at : at + take])
            at += take
            if pos + at == block_end:
                if digest.hexdigest() != hashes[index]:
                    raise ValueError(f"{name}: block {index} does not match its SHA-256")
                yield index
                index, digest = index + 1, hashlib.sha256()
        pos += len(data)


def _blocks(rel: str, ranges: Ranges | None, block: int, count: int, size: int) -> set[int]:
    """The indices of the blocks that hold ``ranges`` (all of them for ``None``)."""
    if ranges is None:
        return set(range(count))
    out: set[int] = set()
    for offset, length in ranges:
        if offset < 0 or length < 0 or offset + length > size:
            raise ValueError(f"{rel}: bytes {offset}+{length} are outside its {size} bytes")
        if length:
            out.update(range(offset // block, (offset + length - 1) // block + 1))
    return out


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted block indices as (first, last) runs of consecutive ones: one request each."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _marked(have: Path) -> set[int]:
    """The block indices marked in ``have``; a line cut short (its writer died) is not one."""
    try:
        lines = have.read_text().split("\n")[:-1]
    except FileNotFoundError:
        return set()
    return {int(line) for line in lines if line}


def _inside(root: Path, rel: str) -> Path:
    """``root / rel``, refusing a manifest entry that would land outside ``root``."""
    parts = PurePosixPath(rel)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts:
        raise ValueError(f"{rel!r} is not a path inside a checkpoint")
    return root / rel


@contextmanager
def _locked(path: Path, timeout_s: float) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (its folder made first); ``TimeoutError`` after
    ``timeout_s``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with flocked(path, timeout_s):
        yield
