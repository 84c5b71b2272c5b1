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
read through the node cache like any object.

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
from trainer_core.manifest import MANIFEST
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
            return self.cache.get(local_key, lambda: self._tok_source(key))
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
