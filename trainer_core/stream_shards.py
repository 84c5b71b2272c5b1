"""Tokenising a streamed input into fixed-row Arrow shards (``trainer_core.streaming``'s
writer): the raw file is read in chunks, encoded batch by batch, and each shard is handed to a
``sink`` (uploaded, or moved under the local cache) as soon as it is full."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig, DataSource
from trainer_core.data import _required_fields
from trainer_core.formats import DataFileError
from trainer_core.manifest import MANIFEST
from trainer_core.shared_data import SharedData
from trainer_core.tasks import task_ops

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "DEFAULT_WINDOW",
    "FORMAT_VERSION",
    "INDEX",
    "STREAMABLE",
    "raw_chunks",
    "tokenize_to_shards",
]

INDEX = "index.json"
FORMAT_VERSION = 1
DEFAULT_SHARD_BYTES = 4 * 1024 * 1024
DEFAULT_WINDOW = 8
STREAMABLE = ("text", "jsonl")
_MAP_BATCH = 1000  # rows per encode call, as ``datasets.map``'s default batch
_MASKS = ("attention_mask", "token_type_ids", "special_tokens_mask")  # 0/1: int8


def raw_chunks(source: DataSource, shared: SharedData | None) -> Iterator[Iterator[bytes]]:
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
    if fmt not in STREAMABLE:
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
        "version": FORMAT_VERSION,
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
