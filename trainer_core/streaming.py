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

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig, DataSource
from trainer_core.data import SharedData, _required_fields, fingerprint, load_tokenized
from trainer_core.formats import DataFileError
from trainer_core.manifest import MANIFEST
from trainer_core.tasks import task_ops

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

INDEX = "index.json"
STREAM_ENV = "SHUNTER_STREAMING"  # "on" | "off" | "auto" (default)
SHARD_BYTES_ENV = "SHUNTER_STREAM_SHARD_BYTES"  # target bytes per shard (default 4 MiB)
WINDOW_ENV = "SHUNTER_STREAM_WINDOW"  # shards shuffled together (default 8)
DEFAULT_SHARD_BYTES = 4 * 1024 * 1024
DEFAULT_WINDOW = 8
_FORMAT_VERSION = 1
_MAP_BATCH = 1000  # rows per encode call, as ``datasets.map``'s default batch
_STREAMABLE = ("text", "jsonl")
_MASKS = ("attention_mask", "token_type_ids", "special_tokens_mask")  # 0/1: int8


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
        return fmt in _STREAMABLE
    if shared is None:
        return False
    size, limit = shared.input_size(source.path), shared.cache_limit
    if size is None or size * 4 <= limit:
        return False
    if fmt not in _STREAMABLE:
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


def load_data(
    source: DataSource,
    cfg: DataConfig,
    *,
    task: str,
    tokenizer: PreTrainedTokenizerBase,
    cache_root: Path,
    shared: SharedData | None = None,
    poll_s: float = 1.0,
) -> Any:
    """``source``'s tokenised rows: a ``ShardedDataset`` when ``wants_streaming``, else
    ``data.load_tokenized``'s ``datasets.Dataset``. Both answer ``len()`` and ``ds[indices]``."""
    if not wants_streaming(source, shared):
        return load_tokenized(
            source,
            cfg,
            task=task,
            tokenizer=tokenizer,
            cache_root=cache_root,
            shared=shared,
            poll_s=poll_s,
        )
    shard_bytes = _env_int(SHARD_BYTES_ENV, DEFAULT_SHARD_BYTES)
    window = _env_int(WINDOW_ENV, DEFAULT_WINDOW)
    base = fingerprint(source, cfg, task, tokenizer, shared=shared, cache_root=cache_root)
    key = _stream_key(base, shard_bytes, window)

    def build(sink: Callable[[Path], None]) -> dict[str, Any]:
        return tokenize_to_shards(
            _raw_chunks(source, shared),
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
    doc = json.dumps(["stream", _FORMAT_VERSION, base, shard_bytes, window])
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


# ---------------------------------------------------------------- tokenising to shards


def _raw_chunks(source: DataSource, shared: SharedData | None) -> Iterator[Iterator[bytes]]:
    """The raw input as byte streams, one per file (a folder: its files in sorted order,
    ``manifest.json`` skipped). Stored inputs stream from the store, verified as they come."""
    assert source.path is not None
    streams = shared.open_input(source.path) if shared is not None else None
    if streams is not None:
        yield from streams
        return
    path = Path(source.path)
    files = (
        sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST)
        if path.is_dir()
        else [path]
    )
    for file in files:
        yield _read_file(file)


def _read_file(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            yield chunk


def _lines(streams: Iterator[Iterator[bytes]]) -> Iterator[tuple[int, str]]:
    """(line number in its file, text) of every line, decoded as UTF-8, without holding more
    than one chunk and one partial line."""
    for stream in streams:
        tail, number = b"", 0
        for chunk in stream:
            parts = (tail + chunk).split(b"\n")
            tail = parts.pop()
            for raw in parts:
                number += 1
                yield number, _decode(raw, number)
        if tail:
            yield number + 1, _decode(tail, number + 1)


def _decode(raw: bytes, number: int) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as e:
        raise DataFileError(f"line {number}: not UTF-8 text ({e})") from None


def _row_batches(
    lines: Iterator[tuple[int, str]], fmt: str, cfg: DataConfig
) -> Iterator[dict[str, list[Any]]]:
    """Rows in batches of ``_MAP_BATCH`` as columns: a text file's lines are ``text`` (as the
    ``datasets`` text loader names it); a jsonl file's objects their own columns."""
    batch: list[Any] = []
    for number, line in lines:
        if fmt == "text":
            batch.append(line)
        else:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DataFileError(f"line {number}: not a JSON object ({e})") from None
            if not isinstance(row, dict):
                raise DataFileError(f"line {number}: not a JSON object")
            batch.append(row)
        if len(batch) == _MAP_BATCH:
            yield _columns(batch, fmt)
            batch = []
    if batch:
        yield _columns(batch, fmt)


def _columns(batch: list[Any], fmt: str) -> dict[str, list[Any]]:
    if fmt == "text":
        return {"text": batch}
    names: list[str] = []
    for row in batch:
        names.extend(k for k in row if k not in names)
    return {name: [row.get(name) for row in batch] for name in names}


def tokenize_to_shards(
    streams: Iterator[Iterator[bytes]],
    fmt: str,
    cfg: DataConfig,
    task: str,
    tokenizer: PreTrainedTokenizerBase,
    *,
    sink: Callable[[Path], None],
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    window: int = DEFAULT_WINDOW,
) -> dict[str, Any]:
    """Tokenise the raw ``streams`` (``fmt``: text or jsonl) batch by batch with the task's
    ``encode`` and write the rows as shards, handing each full shard's file to ``sink`` (which
    moves or uploads it: at most one shard and one batch are held here). Returns the index.
    Rows per shard are fixed by the first batch (``shard_bytes`` / its bytes per row)."""
    if fmt not in _STREAMABLE:
        raise DataFileError(f"streaming reads text or jsonl data, not {fmt}")
    ops = task_ops(task)
    text = cfg.text_field
    required = _required_fields(cfg, task)
    pending: list[pa.Table] = []
    pending_rows = 0
    rows_per_shard = 0
    rows: list[int] = []
    sizes: list[int] = []
    columns: list[str] = []
    with tempfile.TemporaryDirectory(prefix="shunter-shards-") as tmp:

        def flush(table: pa.Table) -> None:
            path = Path(tmp) / f"shard-{len(rows):05d}.arrow"
            with pa.OSFile(str(path), "wb") as out, pa.ipc.new_file(out, table.schema) as writer:
                writer.write_table(table)
            rows.append(table.num_rows)
            sizes.append(path.stat().st_size)
            sink(path)

        for batch in _row_batches(_lines(streams), fmt, cfg):
            missing = [f for f in required if f not in batch]
            if missing:
                raise DataFileError(f"no {', '.join(map(repr, missing))} field in the rows")
            if ops.filter_empty:
                if text not in batch:
                    raise DataFileError(f"no {text!r} field in the rows (data.text_field)")
                keep = [i for i, t in enumerate(batch[text]) if t and str(t).strip()]
                batch = {k: [v[i] for i in keep] for k, v in batch.items()}
                if not keep:
                    continue
            encoded = ops.encode(batch, cfg, tokenizer)
            table = _compact(pa.table(dict(encoded)))
            if table.num_rows == 0:
                continue
            if not rows_per_shard:
                columns = table.column_names
                per_row = max(1, table.nbytes // table.num_rows)
                rows_per_shard = max(1, shard_bytes // per_row)
            pending.append(table)
            pending_rows += table.num_rows
            while pending_rows >= rows_per_shard:
                whole = pa.concat_tables(pending)
                flush(whole.slice(0, rows_per_shard))
                rest = whole.slice(rows_per_shard)
                pending, pending_rows = [rest], rest.num_rows
        if pending_rows:
            flush(pa.concat_tables(pending))
    if not rows:
        raise DataFileError("no rows to train on after tokenising (every row empty?)")
    return {
        "version": _FORMAT_VERSION,
        "rows": rows,
        "bytes": sizes,
        "window": window,
        "columns": columns,
        "task": task,
    }


def _compact(table: pa.Table) -> pa.Table:
    """Integer lists stored narrower than the int64 the tokenizer's Python ints become: 0/1
    masks as int8, token ids and labels as int32 (a value that does not fit raises); read
    back as the same Python ints."""
    fields = []
    for field in table.schema:
        t = field.type
        if pa.types.is_list(t) and pa.types.is_int64(t.value_type):
            narrow = pa.int8() if field.name in _MASKS else pa.int32()
            fields.append(pa.field(field.name, pa.list_(narrow)))
        else:
            fields.append(field)
    return table.cast(pa.schema(fields))


# ---------------------------------------------------------------- reading


class ShardedDataset:
    """The rows of a sharded dataset, read shard by shard.

    ``fetch(name)``: the local path of shard file ``name`` (through the node cache, pinned);
    ``release(name)``: unpin it (the cache may evict it). ``ds[indices]`` → ``{column: [values
    in indices' order]}``, like ``datasets.Dataset``. ``plan(shards)`` (``StreamOrder``) gives
    the epoch's shard order in windows: reading a window fetches the next one ahead and
    releases the windows behind. Without a plan, at most ``keep`` shards stay open.

    ``budget``: bytes this reader may hold pinned in the node cache (half its cap: the rest
    is for the model and other jobs). The next window is fetched ahead only when it fits
    beside what is held; a reader holds at most the one or two windows a batch spans and the
    one ahead, so a cap of 6 x ``window`` x shard bytes always leaves room to prefetch, and
    one of 4 x is needed to stay under it at all (a smaller one is logged)."""

    def __init__(
        self,
        index: dict[str, Any],
        *,
        fetch: Callable[[str], Path],
        release: Callable[[str], None],
        keep: int = 4,
        budget: int | None = None,
    ) -> None:
        if int(index.get("version", 0)) != _FORMAT_VERSION:
            raise ValueError(f"streaming index version {index.get('version')!r} is not readable")
        self.index = index
        self.shard_rows = [int(n) for n in index["rows"]]
        self.shard_bytes = [int(n) for n in index["bytes"]]
        self.window = int(index["window"])
        self.budget = budget
        if budget is not None:
            need = 2 * self.window * max(self.shard_bytes)
            if need > budget:
                log.warning(
                    "a batch may span two windows of %d shards (%d bytes): more than the %d "
                    "bytes of node cache this reader should hold; the cache goes past its cap",
                    self.window,
                    need,
                    budget,
                )
        self.column_names = list(index.get("columns") or [])
        self._starts = np.concatenate([[0], np.cumsum(self.shard_rows)]).astype(np.int64)
        self._fetch, self._release, self._keep = fetch, release, keep
        self._open: dict[int, pa.Table] = {}  # shard -> table, in order of use
        self._ahead: dict[int, Future[Path]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
        self._lock = threading.Lock()
        self._windows: list[list[int]] | None = None
        self._window_of: dict[int, int] = {}
        self.max_open = 0  # most shards held at once (tests, bench)

    def __len__(self) -> int:
        return int(self._starts[-1])

    @staticmethod
    def name(shard: int) -> str:
        return f"shard-{shard:05d}.arrow"

    def plan(self, shards: list[int]) -> None:
        """This epoch's shard order: windows of ``window`` shards, read in turn."""
        self._windows = [shards[i : i + self.window] for i in range(0, len(shards), self.window)]
        self._window_of = {s: w for w, ws in enumerate(self._windows) for s in ws}

    def __getitem__(self, indices: int | list[int]) -> dict[str, Any]:
        if isinstance(indices, int):
            return {k: v[0] for k, v in self[[indices]].items()}
        where = np.asarray(indices, dtype=np.int64)
        if where.size and (where.min() < 0 or where.max() >= len(self)):
            raise IndexError(f"row index out of range 0..{len(self) - 1}")
        shard_of = np.searchsorted(self._starts, where, side="right") - 1
        needed = sorted(set(shard_of.tolist()))
        self._follow(needed)
        out: dict[str, list[Any]] = {name: [None] * len(indices) for name in self.column_names}
        for shard in needed:
            positions = np.nonzero(shard_of == shard)[0]
            local = where[positions] - self._starts[shard]
            part = self._table(shard).take(pa.array(local)).to_pydict()
            for name, values in part.items():
                column = out.setdefault(name, [None] * len(indices))
                for pos, value in zip(positions.tolist(), values, strict=True):
                    column[pos] = value
        return out

    def close(self) -> None:
        """Release every shard (the end of a run)."""
        self._pool.shutdown(wait=True)
        for shard in list(self._ahead):
            self._drop(shard)
        for shard in list(self._open):
            self._drop(shard)

    def _follow(self, needed: list[int]) -> None:
        """Release what the plan has passed, fetch the next window ahead."""
        if self._windows is None or not all(s in self._window_of for s in needed):
            return
        first = min(self._window_of[s] for s in needed)
        last = max(self._window_of[s] for s in needed)
        held = set(self._open) | set(self._ahead)
        for shard in held:
            w = self._window_of.get(shard)
            if w is None or w < first:
                self._drop(shard)
        if last + 1 < len(self._windows):
            ahead = [s for s in self._windows[last + 1] if s not in self._open]
            ahead = [s for s in ahead if s not in self._ahead]
            kept = set(self._open) | set(self._ahead) | set(needed)
            pinned = sum(self.shard_bytes[s] for s in kept | set(ahead))
            if self.budget is not None and pinned > self.budget:
                return  # no room ahead: fetched when read
            for shard in ahead:
                self._ahead[shard] = self._pool.submit(self._fetch, self.name(shard))

    def _table(self, shard: int) -> pa.Table:
        table = self._open.pop(shard, None)
        if table is None:
            ahead = self._ahead.pop(shard, None)
            path = ahead.result() if ahead is not None else self._fetch(self.name(shard))
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_file(source).read_all()
            if self._windows is None:
                while len(self._open) >= self._keep:
                    self._drop(next(iter(self._open)))
        self._open[shard] = table  # most recently used last
        self.max_open = max(self.max_open, len(self._open) + len(self._ahead))
        return table

    def _drop(self, shard: int) -> None:
        ahead = self._ahead.pop(shard, None)
        if ahead is not None:
            with contextlib.suppress(Exception):  # a failed prefetch is retried when read
                ahead.result()  # let the fetch finish before unpinning what it pins
        self._open.pop(shard, None)
        self._release(self.name(shard))


class StreamOrder:
    """Deterministic, resumable, data-parallel batch order over a sharded dataset.

    Each epoch: a generator seeded ``seed + epoch`` permutes the shards, then, window by
    window (``window`` shards in the permuted order), permutes the samples of the window's
    shards together; the epoch's sequence is those windows in turn. As in ``BatchOrder``: the
    last ``n % dp_size`` samples are dropped, rank ``dp_rank`` takes every ``dp_size``-th
    sample from its rank, and the rank's samples are cut into batches (the last may be short).
    A rank reads at most two windows at a time. ``data`` (the dataset) gets each epoch's shard
    order (``ShardedDataset.plan``) as iteration enters it."""

    def __init__(
        self,
        shard_rows: list[int],
        *,
        window: int,
        batch_size: int,
        seed: int,
        dp_rank: int = 0,
        dp_size: int = 1,
        data: ShardedDataset | None = None,
    ) -> None:
        self.shard_rows = [int(n) for n in shard_rows]
        self.num_examples = sum(self.shard_rows)
        if self.num_examples < dp_size:
            raise ValueError(f"{self.num_examples} training examples cannot feed {dp_size} ranks")
        self.window, self.batch_size, self.seed = max(1, window), batch_size, seed
        self.dp_rank, self.dp_size, self.data = dp_rank, dp_size, data
        self._starts = np.concatenate([[0], np.cumsum(self.shard_rows)]).astype(np.int64)

    @classmethod
    def over(
        cls, ds: ShardedDataset, *, batch_size: int, seed: int, dp_rank: int = 0, dp_size: int = 1
    ) -> StreamOrder:
        return cls(
            ds.shard_rows,
            window=ds.window,
            batch_size=batch_size,
            seed=seed,
            dp_rank=dp_rank,
            dp_size=dp_size,
            data=ds,
        )

    def __len__(self) -> int:
        per_rank = self.num_examples // self.dp_size
        return -(-per_rank // self.batch_size)

    def shards(self, epoch: int) -> list[int]:
        """The epoch's shard order."""
        gen = torch.Generator().manual_seed(self.seed + epoch)
        return [int(s) for s in torch.randperm(len(self.shard_rows), generator=gen)]

    def samples(self, epoch: int) -> np.ndarray:
        """The epoch's whole sample sequence (before data-parallel striding)."""
        gen = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(len(self.shard_rows), generator=gen).numpy()
        parts = []
        for w in range(0, len(order), self.window):
            ids = np.concatenate(
                [
                    np.arange(self._starts[s], self._starts[s + 1])
                    for s in order[w : w + self.window]
                ]
            )
            parts.append(ids[torch.randperm(len(ids), generator=gen).numpy()])
        return np.concatenate(parts)

    def epoch(self, epoch: int) -> list[list[int]]:
        seq = self.samples(epoch)
        usable = self.num_examples - self.num_examples % self.dp_size
        mine = seq[self.dp_rank : usable : self.dp_size].tolist()
        return [mine[i : i + self.batch_size] for i in range(0, len(mine), self.batch_size)]

    def iterate(
        self, start_epoch: int, start_batch: int, num_epochs: int | None
    ) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, batch index, indices) from the given position; endless if no epoch cap."""
        epoch, first = start_epoch, start_batch
        while num_epochs is None or epoch < num_epochs:
            if self.data is not None:
                self.data.plan(self.shards(epoch))
            for b, indices in enumerate(self.epoch(epoch)[first:], start=first):
                yield epoch, b, indices
            epoch, first = epoch + 1, 0
