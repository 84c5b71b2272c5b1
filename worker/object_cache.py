"""This node's cache of team objects (datasets, base models, tokenised datasets) from the store.

A job on object storage reads its inputs through here (``worker.inputs``): each object is
downloaded once per node, verified, kept under a byte cap and evicted least recently used.

- **Verified.** An object with a manifest (``objects/<digest>/``, ``.cache/tokenized/<key>/``)
  is fetched block by block through the checkpoint cache (``worker.node_cache``: each 4 MiB
  block's SHA-256 checked before it is marked present), after its manifest's own SHA-256 is
  checked against the digest the job asked for. A listed ``uri`` input (no manifest) is checked
  against the listing's size and, for a single-part upload, its ETag (the MD5 of the bytes).
  Whatever does not match raises ``DataCorrupt`` naming the object; nothing is kept of it.
- **Once per node.** A fetch holds the object's lock (``flock``, released by the kernel if the
  holder dies); a second process asking for the same object waits on it and finds it there.
- **Byte cap, LRU.** ``SHUNTER_NODE_CACHE_BYTES`` (default 50 GiB): before a fetch, whole
  objects are evicted, least recently used first (each use touches the object's mark), until
  the cached objects and the incoming one fit. An object some process uses is **pinned**: every
  user holds a shared ``flock`` on its pin file for as long as it reads it (``close()``, or the
  process's end); the evictor takes the pin exclusively without waiting, and skips the object
  when it cannot. Pinned objects and an object larger than the cap alone may take the cache
  past its cap (logged): a job is never failed or starved to honour it.

Layout under the cache directory (``SHUNTER_NODE_CACHE_DIR``, default ``<tmp>/shunter-cache``)::

    objects/<key>/          the object's files (and its manifest.json when it has one)
    objects/<key>.done      its mark: written last (size in bytes); its mtime is its last use
    objects/<key>.reserved  while it is fetched: its size, so concurrent fetches (a streaming
                            dataset's prefetch thread, other jobs) make room for one another
    pins/<key>.pin          shared-locked by each process using the object
    locks/<key>.lock        held while the object is fetched; evict.lock while evicting
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import storage
from trainer_core.manifest import MANIFEST, parse_manifest
from worker.node_cache import CachedCheckpoint, _locked, fetch_dir

__all__ = [
    "CACHE_BYTES_ENV",
    "CACHE_DIR_ENV",
    "DEFAULT_CACHE_BYTES",
    "DataCorrupt",
    "ListedSource",
    "ManifestSource",
    "ObjectCache",
    "Source",
    "default_cache",
    "listing_id",
    "relative_names",
]

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "SHUNTER_NODE_CACHE_DIR"
CACHE_BYTES_ENV = "SHUNTER_NODE_CACHE_BYTES"
DEFAULT_CACHE_BYTES = 50 * 1024**3
_DONE = ".done"
_RESERVED = ".reserved"  # a fetch under way: its size, counted before the next one makes room


class DataCorrupt(Exception):
    """An object in the store does not match what it claims to be (its digest, a block's
    SHA-256, a listed size or ETag), or a file it lists is missing. The message names it.
    ``worker.classify`` reports it as ``data_corrupt``."""


class Source:
    """What to fetch into the cache: ``name`` (for errors), ``size()`` and ``fetch_into``.
    ``downloads``: whether ``fetch_into`` reads the store (counted in ``fetched_bytes``)."""

    name: str
    downloads = True

    def size(self) -> int:
        raise NotImplementedError

    def fetch_into(self, directory: Path) -> None:
        raise NotImplementedError


class ManifestSource(Source):
    """An object with a manifest at ``uri`` (a store URI or path). ``digest``: the SHA-256 its
    manifest's bytes must have (a team object's id); ``None`` trusts the manifest (a tokenised
    dataset, keyed by its inputs) and still checks every block against it."""

    def __init__(self, uri: str, *, name: str, digest: str | None = None) -> None:
        self.uri, self.name, self.digest = uri, name, digest
        self._manifest: bytes | None = None

    def manifest(self) -> bytes:
        if self._manifest is None:
            try:
                data = storage.read_bytes(storage.join(self.uri, MANIFEST))
            except FileNotFoundError:
                raise DataCorrupt(f"{self.name}: no {MANIFEST} at {self.uri}") from None
            if self.digest is not None and hashlib.sha256(data).hexdigest() != self.digest:
                raise DataCorrupt(
                    f"{self.name}: the manifest at {self.uri} does not hash to {self.digest}"
                )
            try:
                parse_manifest(data)
            except ValueError as e:
                raise DataCorrupt(f"{self.name}: {e}") from None
            self._manifest = data
        return self._manifest

    def files(self) -> dict[str, dict[str, Any]]:
        return parse_manifest(self.manifest())

    def size(self) -> int:
        return sum(int(meta["size"]) for meta in self.files().values())

    def fetch_into(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MANIFEST).write_bytes(self.manifest())
        files = CachedCheckpoint(self.uri, directory)
        try:
            for rel in self.files():
                files.fetch(rel)
        except (ValueError, FileNotFoundError) as e:
            raise DataCorrupt(f"{self.name} ({self.uri}): {e}") from None
        finally:
            shutil.rmtree(fetch_dir(directory), ignore_errors=True)


class ListedSource(Source):
    """Files listed by URI with their size and ETag (a ``uri`` input: no manifest). Each is
    stored under its path relative to the files' common directory."""

    def __init__(self, files: list[dict[str, Any]], *, name: str) -> None:
        self.files, self.name = files, name

    def size(self) -> int:
        return sum(int(f["size"]) for f in self.files)

    def fetch_into(self, directory: Path) -> None:
        for entry, rel in zip(self.files, relative_names(self.files), strict=True):
            dest = directory / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            md5, size = hashlib.md5(usedforsecurity=False), 0
            try:
                with open(dest, "wb") as out:
                    for chunk in storage.open_read(entry["uri"]):
                        out.write(chunk)
                        md5.update(chunk)
                        size += len(chunk)
            except FileNotFoundError:
                raise DataCorrupt(f"{self.name}: {entry['uri']} is missing") from None
            if size != int(entry["size"]):
                raise DataCorrupt(
                    f"{self.name}: {entry['uri']} has {size} bytes, listed {entry['size']}"
                )
            etag = str(entry.get("etag") or "").strip('"')
            if _plain_md5(etag) and md5.hexdigest() != etag:
                raise DataCorrupt(f"{self.name}: {entry['uri']} does not match its ETag {etag}")


def relative_names(files: list[dict[str, Any]]) -> list[str]:
    """Each listed file's path below the files' common directory."""
    dirs = [f["uri"].rsplit("/", 1)[0] for f in files]
    common = os.path.commonpath(dirs) if len(set(dirs)) > 1 else dirs[0]
    return [f["uri"][len(common) :].lstrip("/") for f in files]


def _plain_md5(etag: str) -> bool:
    """A single-part upload's ETag is the MD5 of its bytes; a multipart one (``<md5>-<n>``)
    is not, and is not checked."""
    return len(etag) == 32 and all(c in "0123456789abcdef" for c in etag)


class ObjectCache:
    """The cache in ``root`` (node-local) holding at most about ``limit_bytes``.

    ``get`` pins what it returns for this instance's life: ``close()`` unpins (so does the
    process's end). ``fetched_bytes``: what this instance downloaded."""

    def __init__(
        self, root: Path, *, limit_bytes: int = DEFAULT_CACHE_BYTES, timeout_s: float = 3600.0
    ) -> None:
        self.root, self.limit_bytes, self.timeout_s = Path(root), limit_bytes, timeout_s
        self.fetched_bytes = 0
        self._pins: dict[str, IO[str]] = {}

    def path(self, key: str) -> Path:
        """Where object ``key`` lives (or will, once ``get`` fetched it)."""
        _check_key(key)
        return self.root / "objects" / key

    def cached(self, key: str) -> bool:
        return self._mark(key).exists()

    def get(self, key: str, source: Source | Callable[[], Source]) -> Path:
        """Object ``key``'s directory, fetched from ``source`` unless this node has it; pinned
        until ``close()``. ``DataCorrupt`` when the stored object does not verify;
        ``TimeoutError`` when another process's fetch of it outlasts ``timeout_s``."""
        self._pin(key)
        target, mark = self.path(key), self._mark(key)
        if self._touch(mark):
            return target
        with _locked(self.root / "locks" / f"{key}.lock", self.timeout_s):
            if self._touch(mark):
                return target
            src = source() if callable(source) else source
            size = src.size()
            reserved = self._make_room(size, keep=key)
            try:
                _remove(target)
                try:
                    src.fetch_into(target)
                except BaseException:
                    _remove(target)
                    raise
                tmp = mark.with_name(f"{mark.name}.tmp")
                tmp.write_text(str(size))
                tmp.replace(mark)
            finally:
                reserved.unlink(missing_ok=True)
            if src.downloads:
                self.fetched_bytes += size
        return target

    def release(self, key: str) -> None:
        """Unpin object ``key`` (this instance's pin): the cache may evict it from now on.
        A streaming dataset releases each shard once it has read past it."""
        fh = self._pins.pop(key, None)
        if fh is not None:
            fh.close()

    def close(self) -> None:
        """Unpin every object this instance pinned."""
        for fh in self._pins.values():
            fh.close()
        self._pins.clear()

    def usage(self) -> dict[str, int]:
        """``{key: bytes}`` of every complete object in the cache."""
        out: dict[str, int] = {}
        for mark in (self.root / "objects").glob(f"*{_DONE}"):
            try:
                out[mark.name[: -len(_DONE)]] = int(mark.read_text() or 0)
            except (FileNotFoundError, ValueError):
                continue
        return out

    def _mark(self, key: str) -> Path:
        return self.path(key).with_name(key + _DONE)

    def _touch(self, mark: Path) -> bool:
        """Mark ``mark``'s object used now; False when it is not (completely) cached."""
        try:
            os.utime(mark)
        except FileNotFoundError:
            return False
        return True

    def _pin(self, key: str) -> None:
        if key in self._pins:
            return
        pin = self.root / "pins" / f"{key}.pin"
        pin.parent.mkdir(parents=True, exist_ok=True)
        fh = open(pin, "a")  # noqa: SIM115 - held open until close(): the pin
        fcntl.flock(fh, fcntl.LOCK_SH)  # waits only while an evictor removes the object
        self._pins[key] = fh

    def _make_room(self, incoming: int, *, keep: str) -> Path:
        """Evict unpinned objects, least recently used first, until ``incoming`` more bytes
        fit under the cap, counting the fetches under way (their reservations); then reserve
        ``incoming`` for ``keep`` (the returned file: the caller removes it once its mark is
        written). Without reservations two fetches at once (a prefetching thread, another
        job) would each make room for themselves alone and together pass the cap."""
        with _locked(self.root / "locks" / "evict.lock", self.timeout_s):
            held = self.usage()
            total = sum(held.values()) + self._in_flight(keep) + incoming
            reservation = self.root / "objects" / f"{keep}{_RESERVED}"
            reservation.parent.mkdir(parents=True, exist_ok=True)
            reservation.write_text(str(incoming))
            if total <= self.limit_bytes:
                return reservation
            for key in sorted(held, key=self._last_use):
                if total <= self.limit_bytes:
                    break
                if key != keep and self._evict(key):
                    total -= held[key]
            if total > self.limit_bytes:
                log.warning(
                    "node cache %s holds %d bytes over its cap of %d: the rest is pinned by "
                    "running jobs, or one object is larger than the cap",
                    self.root,
                    total - self.limit_bytes,
                    self.limit_bytes,
                )
            return reservation

    def _in_flight(self, keep: str) -> int:
        """Bytes reserved by fetches under way in any process (a reservation whose fetch
        lock is free is left by a process that died: removed)."""
        total = 0
        for reservation in (self.root / "objects").glob(f"*{_RESERVED}"):
            key = reservation.name[: -len(_RESERVED)]
            if key == keep:
                continue
            with open(self.root / "locks" / f"{key}.lock", "a") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # its fetch holds the lock: under way
                    with contextlib.suppress(FileNotFoundError, ValueError):
                        total += int(reservation.read_text() or 0)
                    continue
                reservation.unlink(missing_ok=True)
                fcntl.flock(fh, fcntl.LOCK_UN)
        return total

    def _last_use(self, key: str) -> float:
        try:
            return self._mark(key).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def _evict(self, key: str) -> bool:
        """Remove object ``key`` unless some process pins it (this one included)."""
        if key in self._pins:
            return False
        pin = self.root / "pins" / f"{key}.pin"
        with open(pin, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            self._mark(key).unlink(missing_ok=True)  # first: a half-removed object is absent
            _remove(self.path(key))
            log.info("node cache %s evicted %s", self.root, key)
            return True


def _remove(target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(fetch_dir(target), ignore_errors=True)


def _check_key(key: str) -> None:
    if not key or "/" in key or key.startswith(".") or key.endswith((_DONE, _RESERVED)):
        raise ValueError(f"{key!r} is not a cache key")


def default_cache() -> ObjectCache:
    """The node's cache as the environment sets it (``SHUNTER_NODE_CACHE_DIR``,
    ``SHUNTER_NODE_CACHE_BYTES``)."""
    root = os.environ.get(CACHE_DIR_ENV) or os.path.join(tempfile.gettempdir(), "shunter-cache")
    raw = os.environ.get(CACHE_BYTES_ENV, "").strip()
    try:
        limit = int(raw) if raw else DEFAULT_CACHE_BYTES
    except ValueError:
        raise ValueError(f"{CACHE_BYTES_ENV}={raw!r}: give a number of bytes") from None
    if limit <= 0:
        raise ValueError(f"{CACHE_BYTES_ENV}={raw!r}: give a positive number of bytes")
    return ObjectCache(Path(root), limit_bytes=limit)


def listing_id(files: list[dict[str, Any]]) -> str:
    """A listed input's identity: the SHA-256 of its files' names, sizes and ETags."""
    rows = [[f["uri"], int(f["size"]), str(f.get("etag") or "")] for f in files]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
