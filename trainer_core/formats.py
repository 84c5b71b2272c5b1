"""Reading a local data source into a ``datasets.Dataset``, one reader per format, with
errors that name the file and the line (the row, for Parquet and saved datasets).

``read_local(source, fields=...)`` → ``datasets.Dataset``; raises ``DataFileError``.

Formats (``DataSource.format``; the suffix picks one when it is omitted):

- ``jsonl`` (and ``json`` holding JSON Lines): one JSON object per line; blank lines skipped.
  Every line must parse, be an object, and give each key the type the key first had
  (``datasets`` cannot load a column that is a number in one row and a string in another).
- ``json``: one JSON document, a list of objects (else it is read as JSON Lines).
- ``csv`` (``delimiter``; ``.tsv`` means tab): a header row, then every row has the header's
  field count. TSV is read without quote handling (SST-2 has bare quotes).
- ``text``: UTF-8 plain text, one example per line, column ``text``.
- ``parquet``: a Parquet file.
- ``save_to_disk``: a folder written by ``Dataset.save_to_disk`` (or a ``DatasetDict``'s,
  whose ``train`` split is used unless it has exactly one split).

``fields``: columns the task reads (text, pair, label, ...): each must exist, and a null in one
is reported with its row (line for line formats).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import datasets

__all__ = ["DataFileError", "read_local"]

_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}


class DataFileError(ValueError):
    """A data file that cannot be read as its format; the message names file and line/row."""


def read_local(
    path: str | Path, fmt: str, *, delimiter: str | None = None, fields: Iterable[str] = ()
) -> datasets.Dataset:
    path = Path(path)
    if fmt == "save_to_disk":
        ds = _read_saved(path)
        _check_fields(ds, path, list(fields), unit="row")
        return ds
    if path.is_dir():
        return _read_folder(path, fmt, delimiter=delimiter, fields=fields)
    if not path.is_file():
        raise DataFileError(f"{path}: not a file (format {fmt})")
    if fmt == "parquet":
        ds = _load("parquet", path)
        _check_fields(ds, path, list(fields), unit="row")
        return ds
    if fmt == "text":
        _scan_text(path)
        return _load("text", path)
    if fmt == "csv":
        delim = delimiter or ","
        lines = _scan_csv(path, delim)
        kwargs: dict[str, Any] = {"delimiter": delim}
        if delim == "\t":
            kwargs["quoting"] = csv.QUOTE_NONE  # TSV corpora (SST-2) contain bare quotes
        ds = _load("csv", path, **kwargs)
        _check_fields(ds, path, list(fields), unit="line", line_of=lines)
        return ds
    if fmt in ("json", "jsonl"):
        lines = _scan_json(path, lines_only=fmt == "jsonl")
        ds = _load("json", path)
        _check_fields(ds, path, list(fields), unit="line", line_of=lines)
        return ds
    raise DataFileError(f"{path}: unknown data format {fmt!r}")


def _read_folder(
    path: Path, fmt: str, *, delimiter: str | None, fields: Iterable[str]
) -> datasets.Dataset:
    """A folder of files in one format (a stored dataset's shards, a listed ``uri`` input):
    each read and checked as a file is, then their rows in the order of their sorted relative
    paths (a fixed order: the batch order depends on it). An object's ``manifest.json`` and
    hidden files are not data."""
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and p.name != "manifest.json"
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    if not files:
        raise DataFileError(f"{path}: an empty folder (format {fmt})")
    parts = [read_local(f, fmt, delimiter=delimiter, fields=fields) for f in files]
    if len(parts) == 1:
        return parts[0]
    try:
        return datasets.concatenate_datasets(parts)
    except ValueError as exc:
        raise DataFileError(f"{path}: its files do not share one set of columns: {exc}") from exc


def _load(builder: str, path: Path, **kwargs: Any) -> datasets.Dataset:
    try:
        ds = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
    except Exception as exc:  # a reader error our scan did not foresee: keep the file name
        cause = exc.__cause__ or exc
        raise DataFileError(f"{path}: cannot read as {builder}: {cause}") from exc
    assert isinstance(ds, datasets.Dataset)
    return ds


def _read_saved(path: Path) -> datasets.Dataset:
    if not path.is_dir():
        raise DataFileError(f"{path}: format save_to_disk needs a folder written by save_to_disk")
    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError as exc:
        raise DataFileError(
            f"{path}: not a datasets save_to_disk folder (no dataset_info.json/state.json "
            f"or dataset_dict.json): {exc}"
        ) from exc
    if isinstance(loaded, datasets.DatasetDict):
        splits = sorted(loaded)
        if "train" in loaded:
            return loaded["train"]
        if len(splits) == 1:
            return loaded[splits[0]]
        raise DataFileError(f"{path}: a DatasetDict with splits {splits} and no 'train'")
    return loaded


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) with a clear error on bytes that are not UTF-8."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataFileError(
                    f"{path}:{number}: not UTF-8 (byte {exc.start + 1} of the line)"
                ) from None


def _scan_text(path: Path) -> None:
    for _ in _lines(path):
        pass


def _scan_csv(path: Path, delimiter: str) -> list[int]:
    """Validate the field counts; the (last) line of each data row."""
    texts = (text for _, text in _lines(path))
    if delimiter == "\t":  # TSV: no quote handling, as the loader reads it
        reader = csv.reader(texts, delimiter=delimiter, quoting=csv.QUOTE_NONE, strict=True)
    else:
        reader = csv.reader(texts, delimiter=delimiter, strict=True)
    header: list[str] | None = None
    line_of: list[int] = []
    try:
        for row in reader:
            if header is None:
                header = row
                if not row or any(not name.strip() for name in row):
                    raise DataFileError(f"{path}:1: the header row has an empty column name")
                continue
            if row and len(row) != len(header):
                raise DataFileError(
                    f"{path}:{reader.line_num}: {len(row)} fields, the header has "
                    f"{len(header)} ({delimiter!r}-separated)"
                )
            if row:
                line_of.append(reader.line_num)
    except csv.Error as exc:
        raise DataFileError(f"{path}:{reader.line_num}: {exc}") from None
    if header is None:
        raise DataFileError(f"{path}: empty (a header row and at least one row expected)")
    return line_of


def _scan_json(path: Path, *, lines_only: bool) -> list[int]:
    """Validate JSON Lines (or, for ``json``, a JSON list of objects); the line of each row."""
    if not lines_only:
        text = path.read_text(encoding="utf-8", errors="replace").lstrip()
        if text.startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DataFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
            for i, row in enumerate(rows):
                if not isinstance(row, dict):
                    raise DataFileError(f"{path}: item {i} of the list is not an object")
            return []
    kinds: dict[str, tuple[str, int]] = {}  # key -> (type name, first line)
    line_of: list[int] = []
    for number, text in _lines(path):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataFileError(
                f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(row, dict):
            raise DataFileError(f"{path}:{number}: a JSON Lines row must be an object")
        for key, value in row.items():
            if value is None:
                continue
            kind = _kind(value)
            first = kinds.setdefault(key, (kind, number))
            if first[0] != kind:
                raise DataFileError(
                    f"{path}:{number}: {key!r} is {kind}, but on line {first[1]} it is {first[0]}"
                )
        line_of.append(number)
    if not line_of:
        raise DataFileError(f"{path}: no rows")
    return line_of


def _kind(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _check_fields(
    ds: datasets.Dataset,
    path: Path,
    fields: list[str],
    *,
    unit: str,
    line_of: list[int] | None = None,
) -> None:
    for name in fields:
        if name not in ds.column_names:
            raise DataFileError(f"{path}: no column {name!r}; it has {ds.column_names}")
        column = ds.with_format("arrow")[name]
        if column.null_count == 0:
            continue
        row = next(i for i, v in enumerate(column.is_null().to_pylist()) if v)
        if unit == "row":
            raise DataFileError(f"{path}: row {row} (from 0): {name!r} is null")
        line = line_of[row] if line_of else row + 1
        raise DataFileError(f"{path}:{line}: {name!r} is missing or empty")
