"""A job's stored inputs on this node: datasets and base models from the store, read through
the node's cache (``worker.object_cache``), and tokenised datasets shared through the store.

The launch payload carries the job's resolved references (``payload["inputs"]``, stored at
submit)::

    {"ds-abc": {"uri": "<storage>/objects/<digest>", "digest": "<digest>", "kind": "dataset",
                "format": "jsonl", "file": "train.jsonl"},
     "mdl-xyz": {"uri": "...", "digest": "...", "kind": "model"},
     "s3://bucket/p/*.parquet": {"kind": "uri", "format": "parquet",
                "files": [{"uri": "s3://bucket/p/a.parquet", "size": 123, "etag": "..."}]}}

``localize(spec, inputs, ...)`` rewrites the spec trainer_core builds from: a dataset
reference (``data.<split>: {dataset: ds-…}`` or ``{uri: s3://…}``) becomes ``{path: <local
file or folder>, format}``, a model reference (``model.name_or_path`` / ``model.tokenizer``
naming ``mdl-…`` or ``s3://…``) the local directory of its files. Models are fetched at once;
a dataset is fetched only when read (``NodeInputs.materialize``): a job whose tokenised data is
already in the store never downloads the raw file.

``NodeInputs`` is trainer_core's ``SharedData``. Tokenised datasets live in the store under
``<storage>/.cache/tokenized/<key>/`` (``save_to_disk`` files, ``manifest.json`` last) and are
read through the node cache like any object. A dataset larger than the cache streams
(``trainer_core.streaming``): its raw file is read from the store block by block, each block
checked against its manifest (``open_input``), never cached whole; its tokenised shards are
uploaded one at a time (``put_tokenized_file``, then ``finish_tokenized`` writes the manifest)
and read one shard per cache object (``fetch_tokenized_file``, unpinned by
``release_tokenized_file`` once the reader has passed it).

**Who builds a tokenised dataset** (two jobs racing on the same key): a claim object beside it,
``<key>.claim`` = ``{"token", "expires"}``, with a lease the holder renews every third of
``lease_s`` while it tokenises and deletes when done. On a local or shared-filesystem store the
claim is created with ``O_CREAT | O_EXCL``: exactly one process wins. On S3 (no conditional
write through pyarrow) a claimant writes its claim only when none is live, waits ``settle_s``
and reads it back: the last writer owns it, so two claims written within ``settle_s`` of each
other elect one builder. Two builders are possible only when one claimant's look-then-write
spans more than ``settle_s``; the keys and bytes are the same, so that costs time, never
correctness (the manifest is written last; the second publish rewrites identical files). A
holder that dies stops renewing: its claim lapses after ``lease_s`` and a waiter takes over.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import storage
from storage.manifest import manifest_bytes, object_file_table
from trainer_core.manifest import MANIFEST, blocks_of, file_table, parse_manifest
from worker.object_cache import (
    DataCorrupt,
    ListedSource,
    ManifestSource,
    ObjectCache,
    Source,
    listing_id,
)

__all__ = ["NodeInputs", "localize", "tokenized_root"]

log = logging.getLogger(__name__)

_DATA_SPLITS = ("train", "eval")
_INDEX = "index.json"  # trainer_core.streaming.INDEX
_MODEL_FIELDS = ("name_or_path", "tokenizer")


def tokenized_root(storage_root: str) -> str:
    """Where tokenised datasets live in the store whose root is ``storage_root``."""
    return storage.join(storage_root, storage.TOKENIZED_PREFIX)


class NodeInputs:
    """A job's inputs on this node (trainer_core's ``SharedData``). ``tokenized``: the store
    URI of the tokenised datasets (``tokenized_root``); ``None`` keeps them in this node's
    cache only."""

    def __init__(
        self,
        cache: ObjectCache,
        *,
        tokenized: str | None,
        lease_s: float = 120.0,
        settle_s: float = 1.0,
    ) -> None:
        self.cache, self.tokenized, self.lease_s, self.settle_s = (
            cache,
            tokenized,
            lease_s,
            settle_s,
        )
        self._lazy: dict[str, tuple[str, Any]] = {}  # local path -> (cache key, source)
        self._ids: dict[str, str] = {}  # local path -> content SHA-256
        self._tables: dict[str, dict[str, Any]] = {}  # streaming key -> its manifest table

    # ------------------------------------------------------------------ inputs

    def dataset(self, ref: str, entry: dict[str, Any]) -> dict[str, Any]:
        """The path form of dataset reference ``ref`` (not fetched until ``materialize``)."""
        kind = entry.get("kind")
        if kind == "uri" or "files" in entry:
            files = _stamped(ref, list(entry["files"]))
            key = f"uri-{listing_id(files)}"
            root = self.cache.path(key)
            path = str(root / files[0]["uri"].rsplit("/", 1)[1]) if len(files) == 1 else str(root)
            self._lazy[path] = (key, ListedSource(files, name=ref))
            self._ids[path] = listing_id(files)
        else:
            digest, source = self._object(ref, entry)
            key = f"obj-{digest}"
            rel = entry.get("file")
            if not rel:
                table = source.files()
                rel = next(iter(table)) if len(table) == 1 else None
            path = str(self.cache.path(key) / rel) if rel else str(self.cache.path(key))
            self._lazy[path] = (key, source)
            if rel:
                self._ids[path] = str(source.files()[rel]["sha256"])
            else:
                self._ids[path] = digest
        out: dict[str, Any] = {"path": path}
        for field in ("format", "delimiter"):
            if entry.get(field):
                out[field] = entry[field]
        return out

    def model(self, ref: str, entry: dict[str, Any]) -> str:
        """The local directory of model reference ``ref``, fetched now."""
        if entry.get("kind") == "uri" or "files" in entry:
            files = _stamped(ref, list(entry["files"]))
            key = f"uri-{listing_id(files)}"
            return str(self.cache.get(key, ListedSource(files, name=ref)))
        digest, source = self._object(ref, entry)
        return str(self.cache.get(f"obj-{digest}", source))

    def _object(self, ref: str, entry: dict[str, Any]) -> tuple[str, ManifestSource]:
        digest = str(entry.get("digest") or "")
        uri = entry.get("uri") or ""
        if not digest or not uri:
            raise DataCorrupt(f"{ref}: the job's inputs name no stored object (uri, digest)")
        source = ManifestSource(uri, name=ref, digest=digest)
        source.manifest()  # checked now: a corrupt or missing object fails before any rank trains
        return digest, source

    # ------------------------------------------------------------------ SharedData

    def content_id(self, path: str) -> str | None:
        return self._ids.get(path)

    def materialize(self, path: str) -> None:
        lazy = self._lazy.get(path)
        if lazy is not None:
            self.cache.get(*lazy)

    def fetch_tokenized(self, key: str) -> Path | None:
        local_key = f"tok-{key}"
        if self.cache.cached(local_key):
            local = self.cache.get(local_key, lambda: self._tok_source(key))
            self._keep_stored(key, local)
            return local
        if self.tokenized is None:
            return None
        uri = storage.join(self.tokenized, key)
        if not storage.exists(storage.join(uri, MANIFEST)):
            return None
        try:
            return self.cache.get(local_key, self._tok_source(key))
        except DataCorrupt as e:
            # Derived data, not the team's: drop the bad copy (manifest first, so nobody
            # reads it) and let this job build it again rather than fail every job on it.
            log.warning("tokenised dataset %s is corrupt in the store; rebuilding: %s", key, e)
            storage.delete_tree(storage.join(uri, MANIFEST))
            storage.delete_tree(uri)
            return None

    def _keep_stored(self, key: str, local: Path) -> None:
        """The store holds ``key`` whenever this node's cache does: upload the node's copy
        (files first, manifest last) when the store lacks it.

        A rank that finds ``key`` in its node's cache does not build it (rank 0 in
        ``trainer_core.data._obtain``), and the ranks on the other nodes then fetch it from
        the store. The node cache is not the store's mirror: it outlives a store copy that was
        deleted (as corrupt, or cleaned up), and one node cache serves every storage root its
        jobs name. Seen in the private-disk e2e: the second test's bucket lacked the key its
        first test had left in a node's cache, rank 0 ran there, and every rank on a fresh
        node failed with "missing from the store after rank 0" until rank 0 landed on a node
        without the copy: two of ``max_restarts`` spent before the fault the test injects.
        One existence check per cache hit (an S3 HEAD) while the store holds it."""
        if self.tokenized is None:
            return
        uri = storage.join(self.tokenized, key)
        if storage.exists(storage.join(uri, MANIFEST)):
            return
        manifest = (local / MANIFEST).read_bytes()
        staged = self.cache.root / "republish" / f"{key}.{secrets.token_hex(4)}"
        try:
            for rel in parse_manifest(manifest):  # hard links: the manifest is not among them
                (staged / rel).parent.mkdir(parents=True, exist_ok=True)
                os.link(local / rel, staged / rel)
            storage.upload_dir(staged, uri)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        storage.write_bytes(storage.join(uri, MANIFEST), manifest)  # last: now readers see it
        log.info("tokenised dataset %s was on this node but not in the store: uploaded", key)

    # ------------------------------------------------------------------ streaming
    # A dataset larger than the cache (``trainer_core.streaming``): its raw file streamed from
    # the store, verified block by block; its tokenised shards published one at a time and
    # read one at a time through the cache.

    @property
    def cache_limit(self) -> int:
        return self.cache.limit_bytes

    def input_size(self, path: str) -> int | None:
        """Bytes of the stored input at local ``path`` (known without fetching it)."""
        lazy = self._lazy.get(path)
        if lazy is None:
            return None
        _, source = lazy
        if isinstance(source, ManifestSource):
            rel = self._rel(path, source)
            table = source.files()
            if rel is not None:
                return int(table[rel]["size"])
        return int(source.size())

    def open_input(self, path: str) -> Iterator[Iterator[bytes]] | None:
        """The stored input at local ``path`` as byte streams from the store (one per file,
        in sorted order), each block checked as it arrives; ``None``: not a stored input."""
        lazy = self._lazy.get(path)
        if lazy is None:
            return None
        key, source = lazy
        if self.cache.cached(key):  # on this node already: read it there
            return None
        if isinstance(source, ManifestSource):
            table = source.files()
            rel = self._rel(path, source)
            names = [rel] if rel is not None else sorted(n for n in table if n != MANIFEST)
            return iter(
                [
                    _verified(storage.join(source.uri, n), table[n], name=f"{source.name}: {n}")
                    for n in names
                ]
            )
        assert isinstance(source, ListedSource)
        return iter([_listed(entry, name=source.name) for entry in source.files])

    def _rel(self, path: str, source: ManifestSource) -> str | None:
        root = str(self.cache.path(self._lazy[path][0]))
        rel = path[len(root) :].lstrip("/")
        return rel if rel and rel in source.files() else None

    def _store(self) -> str:
        return self.tokenized or str(self.cache.root / "tokenized-local")

    def tokenized_index(self, key: str) -> dict[str, Any] | None:
        """The index of streaming dataset ``key`` when the store holds it whole (its
        manifest, written last, exists and lists the index)."""
        uri = storage.join(self._store(), key)
        try:
            table = parse_manifest(storage.read_bytes(storage.join(uri, MANIFEST)))
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise DataCorrupt(f"tokenized {key}: {e}") from None
        meta = table.get(_INDEX)
        if meta is None:
            raise DataCorrupt(f"tokenized {key}: its manifest lists no {_INDEX}")
        data = b"".join(_verified(storage.join(uri, _INDEX), meta, name=f"tokenized {key}"))
        self._tables[key] = table
        return dict(json.loads(data))

    def fetch_tokenized_file(self, key: str, name: str) -> Path:
        """Shard ``name`` of streaming dataset ``key`` through the node cache (verified,
        pinned until ``release_tokenized_file``)."""
        table = self._tables.get(key)
        if table is None:
            self.tokenized_index(key)
            table = self._tables[key]
        if name not in table:
            raise DataCorrupt(f"tokenized {key}: its manifest lists no {name}")
        uri = storage.join(self._store(), key, name)
        local = self.cache.get(
            _shard_key(key, name), _FileSource(uri, table[name], name=f"tokenized {key}/{name}")
        )
        return local / name

    def release_tokenized_file(self, key: str, name: str) -> None:
        self.cache.release(_shard_key(key, name))

    def put_tokenized_file(self, key: str, path: Path) -> dict[str, Any]:
        """Upload one built file of streaming dataset ``key`` and delete it here; returns its
        manifest row."""
        row = file_table(_alone(path))[path.name]
        uri = storage.join(self._store(), key, path.name)
        if storage.is_remote(uri):
            storage.upload_dir(path.parent, storage.join(self._store(), key))
        else:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, uri)
        path.unlink()
        return {path.name: row}

    def finish_tokenized(self, key: str, files: dict[str, Any]) -> None:
        """Publish streaming dataset ``key``: its manifest, after every file it lists."""
        storage.write_bytes(storage.join(self._store(), key, MANIFEST), manifest_bytes(files))

    def _tok_source(self, key: str) -> ManifestSource:
        return ManifestSource(storage.join(self.tokenized or "", key), name=f"tokenized {key}")

    @contextmanager
    def claim_tokenized(self, key: str) -> Iterator[bool]:
        if self.tokenized is None:
            yield True
            return
        claim = storage.join(self.tokenized, f"{key}.claim")
        token = secrets.token_hex(8)
        if not self._claim(claim, token):
            yield False
            return
        stop = threading.Event()
        renew = threading.Thread(
            target=self._renew, args=(claim, token, stop), daemon=True, name="tokenize-claim"
        )
        renew.start()
        try:
            yield True
        finally:
            stop.set()
            renew.join()
            try:
                if _read_claim(claim).get("token") == token:
                    storage.delete_tree(claim)
            except (FileNotFoundError, ValueError):
                pass

    def publish_tokenized(self, key: str, directory: Path) -> Path:
        files = object_file_table(directory)
        if self.tokenized is not None:
            uri = storage.join(self.tokenized, key)
            storage.upload_dir(directory, uri)
            storage.write_bytes(storage.join(uri, MANIFEST), manifest_bytes(files))  # last
        return self.cache.get(f"tok-{key}", _Adopt(directory, files, name=f"tokenized {key}"))

    def _claim(self, claim: str, token: str) -> bool:
        doc = json.dumps({"token": token, "expires": time.time() + self.lease_s}).encode()
        if not storage.is_remote(claim):
            path = Path(claim)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{token}")
            tmp.write_bytes(doc)
            try:
                for _ in range(2):
                    try:
                        os.link(tmp, path)  # create-if-absent, whole: exactly one wins
                        return True
                    except FileExistsError:
                        if _live(_read_claim(claim)):
                            return False
                        path.unlink(missing_ok=True)  # lapsed: its holder died
                return False
            finally:
                tmp.unlink(missing_ok=True)
        if _live(_read_claim(claim)):
            return False
        storage.write_bytes(claim, doc)
        time.sleep(self.settle_s)  # a racing claimant's write lands in this window: theirs wins
        return _read_claim(claim).get("token") == token

    def _renew(self, claim: str, token: str, stop: threading.Event) -> None:
        while not stop.wait(self.lease_s / 3):
            doc = {"token": token, "expires": time.time() + self.lease_s}
            try:
                if _read_claim(claim).get("token") != token:
                    return
                if storage.is_remote(claim):
                    storage.write_bytes(claim, json.dumps(doc).encode())
                else:
                    tmp = Path(f"{claim}.{token}")
                    tmp.write_text(json.dumps(doc))
                    tmp.replace(claim)
            except (OSError, ValueError) as e:  # the next renewal tries again
                log.warning("could not renew the claim %s: %s", claim, e)


def _stamped(ref: str, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Listed files, each with a version stamp: its ETag (derived from its bytes), else, read
    now, its modification time (``mtime:<ns>``). The stamp is part of the node-cache key and
    of the tokenised key, so a file rewritten in the bucket after submit is fetched and
    tokenised anew, never served from an older copy. ``DataCorrupt`` for a missing file."""
    if not files:
        raise DataCorrupt(f"{ref}: the listing has no files")
    if all(f.get("etag") for f in files):
        return files
    from pyarrow.fs import FileType

    fs, _ = storage.resolve(files[0]["uri"])
    infos = fs.get_file_info([storage.resolve(f["uri"])[1] for f in files])
    out = []
    for entry, info in zip(files, infos, strict=True):
        if info.type != FileType.File:
            raise DataCorrupt(f"{ref}: {entry['uri']} is missing")
        out.append({**entry, "etag": entry.get("etag") or f"mtime:{info.mtime_ns}"})
    return out


class _Adopt(Source):
    """A source that moves a just-built local directory into the cache (it is in the store
    already: no download)."""

    downloads = False

    def __init__(self, directory: Path, files: dict[str, Any], *, name: str) -> None:
        self.directory, self.files, self.name = directory, files, name

    def size(self) -> int:
        return sum(int(m["size"]) for m in self.files.values())

    def fetch_into(self, directory: Path) -> None:
        directory.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(self.directory), str(directory))
        (directory / MANIFEST).write_bytes(manifest_bytes(self.files))


def _shard_key(key: str, name: str) -> str:
    return f"tok-{key}-{name}"


def _alone(path: Path) -> Path:
    """``path``'s folder when ``path`` is the only file in it (the shard writer's own)."""
    others = [p for p in path.parent.iterdir() if p != path]
    if others:
        raise ValueError(f"{path.parent} holds more than {path.name}")
    return path.parent


def _verified(uri: str, meta: dict[str, Any], *, name: str) -> Iterator[bytes]:
    """The file at ``uri`` in blocks, each yielded only once its SHA-256 matches ``meta``'s
    (a manifest row); ``DataCorrupt`` naming ``name`` on a mismatch, a short or long file, or
    a missing one."""
    block, hashes = blocks_of(meta)
    size = int(meta["size"])
    buf, i, total = bytearray(), 0, 0

    def check(data: bytes | bytearray) -> None:
        nonlocal i
        if i >= len(hashes) or hashlib.sha256(data).hexdigest() != hashes[i]:
            raise DataCorrupt(f"{name}: block {i} of {uri} does not match its manifest")
        i += 1

    try:
        for chunk in storage.open_read(uri):
            buf += chunk
            total += len(chunk)
            while len(buf) >= block and total <= size:
                data = bytes(buf[:block])
                check(data)
                del buf[:block]
                yield data
    except FileNotFoundError:
        raise DataCorrupt(f"{name}: {uri} is missing") from None
    if total != size:
        raise DataCorrupt(f"{name}: {uri} has {total} bytes, its manifest says {size}")
    if buf:
        check(buf)
        yield bytes(buf)
    if size and i != len(hashes):
        raise DataCorrupt(f"{name}: {uri} is shorter than its manifest's blocks")


def _listed(entry: dict[str, Any], *, name: str) -> Iterator[bytes]:
    """A listed file's bytes from the store, checked against its listed size and (a
    single-part upload) its ETag at the end."""
    md5, size = hashlib.md5(usedforsecurity=False), 0
    try:
        for chunk in storage.open_read(entry["uri"]):
            md5.update(chunk)
            size += len(chunk)
            yield chunk
    except FileNotFoundError:
        raise DataCorrupt(f"{name}: {entry['uri']} is missing") from None
    if size != int(entry["size"]):
        raise DataCorrupt(f"{name}: {entry['uri']} has {size} bytes, listed {entry['size']}")
    etag = str(entry.get("etag") or "").strip('"')
    if len(etag) == 32 and all(c in "0123456789abcdef" for c in etag) and md5.hexdigest() != etag:
        raise DataCorrupt(f"{name}: {entry['uri']} does not match its ETag {etag}")


class _FileSource(Source):
    """One file of a stored dataset (a streaming shard) with its manifest row: fetched into
    the cache block by block, each block checked."""

    def __init__(self, uri: str, meta: dict[str, Any], *, name: str) -> None:
        self.uri, self.meta, self.name = uri, meta, name

    def size(self) -> int:
        return int(self.meta["size"])

    def fetch_into(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / self.uri.rsplit("/", 1)[1], "wb") as out:
            for data in _verified(self.uri, self.meta, name=self.name):
                out.write(data)


def _read_claim(claim: str) -> dict[str, Any]:
    try:
        doc = json.loads(storage.read_bytes(claim, max_bytes=4096) or b"{}")
    except FileNotFoundError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _live(doc: dict[str, Any]) -> bool:
    return bool(doc) and float(doc.get("expires", 0)) > time.time()


def localize(
    spec: dict[str, Any], inputs: dict[str, Any] | None, node: NodeInputs
) -> dict[str, Any]:
    """``spec`` (a JobSpec document) with every stored reference replaced by its local form,
    through ``node`` (see the module doc). A reference the inputs do not resolve is left as
    it is (JobSpec validation names it). ``DataCorrupt`` when an object does not verify."""
    inputs = inputs or {}
    out = dict(spec)
    data = dict(out.get("data") or {})
    for split in _DATA_SPLITS:
        source = data.get(split)
        if not isinstance(source, dict):
            continue
        ref = source.get("dataset") or source.get("uri")
        if ref and ref in inputs:
            rest = {k: v for k, v in source.items() if k not in ("dataset", "uri", "path")}
            data[split] = {**rest, **node.dataset(ref, inputs[ref])}
    if data:
        out["data"] = data
    model = dict(out.get("model") or {})
    for field in _MODEL_FIELDS:
        ref = model.get(field)
        if isinstance(ref, str) and ref in inputs:
            model[field] = node.model(ref, inputs[ref])
    if model:
        out["model"] = model
    return out
