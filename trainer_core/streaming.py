"""Streaming datasets: tokenised once into fixed-row shards, read shard by shard under a
bounded node cache, in a deterministic, resumable order.

A dataset too large for the node's cache (``wants_streaming``) is not fetched whole: its raw
file is read from the store in chunks (each 4 MiB block checked against the object's
manifest), tokenised batch by batch and written as shards, each uploaded and dropped from
local disk as soon as it is full. The store then holds::

    <storage>/.cache/tokenized/<key>/
        shard-00000.arrow ...   Arrow IPC files of ``rows_per_shard`` rows (the last shorter)
        index.json              {"version", "rows": [rows of each shard], "window", "columns"}
        manifest.json           written LAST: size + SHA-256 (and 4 MiB blocks) of each file

Training reads it through ``ShardedDataset``: each shard is fetched through the node cache
(verified, LRU under ``SHUNTER_NODE_CACHE_BYTES``) when a batch needs it, the next window's
shards are fetched ahead in a background thread, and shards behind are unpinned so the cache
may evict them. ``StreamOrder`` is the order: per epoch the shard order is shuffled with
``seed + epoch``, then the samples of each window of ``window`` shards are shuffled together
(MosaicML Streaming's shard-block shuffle), then the epoch's sequence is strided over
data-parallel ranks and cut into batches exactly as ``BatchOrder`` does. It is a pure
function of (seed, epoch, dp_rank, dp_size) and of the index (sharding and window are fixed
when the dataset is built, never by the reading node's cache), so a resume at (epoch, batch)
starts at exactly the next batch without reading the skipped ones.

Without object storage (a shared or local disk, torchrun) the shards are written under
``cache_root/<key>`` and read from there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Unpack

import torch.distributed as dist

from trainer_core.config import DataConfig, DataSource
from trainer_core.data import LoadArgs, fingerprint, load_tokenized
from trainer_core.shared_data import SharedData
from trainer_core.stream_read import ShardedDataset, StreamOrder
from trainer_core.stream_shards import (
    DEFAULT_SHARD_BYTES,
    DEFAULT_WINDOW,
    FORMAT_VERSION,
    INDEX,
    STREAMABLE,
    raw_chunks,
    tokenize_to_shards,
)

__all__ = [
    "INDEX",
    "SHARD_BYTES_ENV",
    "STREAM_ENV",
    "WINDOW_ENV",
    "ShardedDataset",
    "StreamOrder",
    "load_data",
    "tokenize_to_shards",
    "wants_streaming",
]

log = logging.getLogger(__name__)

STREAM_ENV = "SHUNTER_STREAMING"  # "on" | "off" | "auto" (default)
SHARD_BYTES_ENV = "SHUNTER_STREAM_SHARD_BYTES"  # target bytes per shard (default 4 MiB)
WINDOW_ENV = "SHUNTER_STREAM_WINDOW"  # shards shuffled together (default 8)


# ---------------------------------------------------------------- choosing


def wants_streaming(source: DataSource, shared: SharedData | None) -> bool:
    """Whether ``source`` is read as a streaming dataset.

    ``SHUNTER_STREAMING=on`` streams every local or stored text/jsonl input, ``off`` none.
    The default (``auto``) streams a stored input (object storage: ``shared``) whose size is
    more than a quarter of the node cache's cap: the rest fit and keep ``BatchOrder``. Hub
    datasets and formats other than text/jsonl are never streamed (logged when auto would).
    """
    mode = os.environ.get(STREAM_ENV, "auto").strip().lower() or "auto"
    if mode not in ("on", "off", "auto"):
        raise ValueError(f"{STREAM_ENV}={mode!r}: give on, off or auto")
    if mode == "off" or source.path is None:
        return False
    fmt = _format(source)
    if mode == "on":
        return fmt in STREAMABLE
    if shared is None:
        return False
    size, limit = shared.input_size(source.path), shared.cache_limit
    if size is None or size * 4 <= limit:
        return False
    if fmt not in STREAMABLE:
        log.warning(
            "%s (%d bytes) is larger than a quarter of the node cache (%d) but %s data is not "
            "streamed (text and jsonl are): it is fetched whole",
            source.path,
            size,
            limit,
            fmt,
        )
        return False
    return True


def _format(source: DataSource) -> str:
    if source.format is not None:
        return str(source.format)
    from shunter.jobspec import DataSource as SpecSource

    return str(SpecSource.model_validate({"path": source.path}).format)


def load_data(source: DataSource, cfg: DataConfig, **args: Unpack[LoadArgs]) -> Any:
    """``source``'s tokenised rows: a ``ShardedDataset`` when ``wants_streaming``, else
    ``data.load_tokenized``'s ``datasets.Dataset`` (which takes the same arguments). Both
    answer ``len()`` and ``ds[indices]``."""
    shared = args.get("shared")
    if not wants_streaming(source, shared):
        return load_tokenized(source, cfg, **args)
    task, tokenizer, cache_root = args["task"], args["tokenizer"], args["cache_root"]
    poll_s = args.get("poll_s", 1.0)
    shard_bytes = _env_int(SHARD_BYTES_ENV, DEFAULT_SHARD_BYTES)
    window = _env_int(WINDOW_ENV, DEFAULT_WINDOW)
    base = fingerprint(source, cfg, task, tokenizer, shared=shared, cache_root=cache_root)
    key = _stream_key(base, shard_bytes, window)

    def build(sink: Callable[[Path], None]) -> dict[str, Any]:
        return tokenize_to_shards(
            raw_chunks(source, shared),
            _format(source),
            cfg,
            task,
            tokenizer,
            sink=sink,
            shard_bytes=shard_bytes,
            window=window,
        )

    distributed = dist.is_available() and dist.is_initialized()
    if shared is not None:
        if not distributed or dist.get_rank() == 0:
            _obtain_shared(shared, key, build, poll_s)
        if distributed:
            dist.barrier()  # the store holds it
        index = shared.tokenized_index(key)
        if index is None:
            raise RuntimeError(f"streaming dataset {key} missing from the store after building")
        return ShardedDataset(
            index,
            fetch=lambda name: shared.fetch_tokenized_file(key, name),
            release=lambda name: shared.release_tokenized_file(key, name),
            budget=shared.cache_limit // 2,
        )
    directory = cache_root / key
    if not distributed or dist.get_rank() == 0:
        _obtain_local(directory, build)
    if distributed:
        dist.barrier()
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            _obtain_local(directory, build)  # a node that cannot see rank 0's disk
        dist.barrier()
    index = json.loads((directory / INDEX).read_text())
    return ShardedDataset(index, fetch=lambda name: directory / name, release=lambda name: None)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: give a positive whole number") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r}: give a positive whole number")
    return value


def _stream_key(base: str, shard_bytes: int, window: int) -> str:
    doc = json.dumps(["stream", FORMAT_VERSION, base, shard_bytes, window])
    return hashlib.sha256(doc.encode()).hexdigest()


def _obtain_shared(
    shared: SharedData,
    key: str,
    build: Callable[[Callable[[Path], None]], dict[str, Any]],
    poll_s: float,
) -> None:
    """The store holds streaming dataset ``key`` when this returns: it did, or this process
    won the build claim and built it shard by shard (each shard uploaded as it is written),
    or another claim holder published it while this one waited."""
    while shared.tokenized_index(key) is None:
        with shared.claim_tokenized(key) as mine:
            if mine:
                if shared.tokenized_index(key) is not None:
                    return
                files: dict[str, dict[str, Any]] = {}

                def sink(path: Path, files: dict[str, dict[str, Any]] = files) -> None:
                    files.update(shared.put_tokenized_file(key, path))

                index = build(sink)
                with tempfile.TemporaryDirectory(prefix="shunter-index-") as tmp:
                    path = Path(tmp) / INDEX
                    path.write_text(json.dumps(index))
                    sink(path)
                shared.finish_tokenized(key, files)  # the manifest, last
                return
        time.sleep(poll_s)


def _obtain_local(
    directory: Path, build: Callable[[Callable[[Path], None]], dict[str, Any]]
) -> None:
    if (directory / INDEX).exists():
        return
    tmp = directory.with_name(f"{directory.name}.tmp-{uuid.uuid4().hex}")
    tmp.mkdir(parents=True)

    def sink(path: Path) -> None:
        shutil.move(str(path), str(tmp / path.name))

    try:
        index = build(sink)
        (tmp / INDEX).write_text(json.dumps(index))
        tmp.rename(directory)  # atomic: a crash never leaves half a dataset
    except OSError:
        if not (directory / INDEX).exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
