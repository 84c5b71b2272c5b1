"""What an uploaded dataset or model folder must be, checked before anything is stored.

``dataset_facts(folder)``: every file is one of the formats a job reads (jsonl, json, csv,
tsv, txt, parquet), all of one format and with the same columns; the facts are the format,
the columns, the row count and a few sample rows. ``model_facts(folder)``: an HF-layout
folder (``config.json`` with a ``model_type``, safetensors weights, tokenizer files) that
this service will load (no ``auto_map`` custom code, no pickle-only weights). A problem is
``Unprocessable`` naming the file and, for a data row, its line.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.errors import Unprocessable

__all__ = [
    "DATASET_FORMATS",
    "ObjectFacts",
    "dataset_facts",
    "model_facts",
    "spec_format",
]

# Upload suffix -> the format name; the spec's (``DataSource.format``) is ``spec_format``.
DATASET_FORMATS = {
    ".jsonl": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".txt": "txt",
    ".parquet": "parquet",
}
_SAMPLE_ROWS = 3
_MAX_CELL = 200  # characters of a sample cell kept
_MAX_JSON_BYTES = 4 * 1024 * 1024
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "spiece.model")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


@dataclass(frozen=True, kw_only=True)
class ObjectFacts:
    """What the checks learnt of a dataset or model folder."""

    format: str  # jsonl | json | csv | tsv | txt | parquet (datasets); hf (models)
    columns: list[str]
    rows: int | None
    sample: list[Any]
    files: list[str]
    bytes: int


def spec_format(fmt: str) -> tuple[str, str | None]:
    """``(DataSource.format, delimiter)`` a job reads a dataset of upload format ``fmt`` with."""
    return {"tsv": ("csv", "\t"), "txt": ("text", None), "csv": ("csv", ",")}.get(fmt, (fmt, None))


def _bad(rel: str, problem: str) -> Unprocessable:
    return Unprocessable(f"{rel}: {problem}", detail="invalid_dataset")


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_CELL:
        return value[:_MAX_CELL] + "…"
    return value


def _sample_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _short(v) for k, v in row.items()}


def _jsonl(path: Path, rel: str) -> tuple[list[str], int, list[Any]]:
    columns: dict[str, None] = {}
    sample: list[Any] = []
    rows = 0
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _bad(rel, f"line {number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise _bad(rel, f"line {number}: expected a JSON object per line (one row)")
            if rows == 0:
                columns = dict.fromkeys(row)
            elif any(k not in row for k in columns):
                missing = [k for k in columns if k not in row]
                raise _bad(rel, f"line {number}: missing column(s) {', '.join(missing)}")
            rows += 1
            if len(sample) < _SAMPLE_ROWS:
                sample.append(_sample_row(row))
    return list(columns), rows, sample


def _json(path: Path, rel: str) -> tuple[list[str], int, list[Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise _bad(rel, f"line {exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise _bad(rel, "expected a JSON array of objects (one per row); use .jsonl for lines")
    if not data:
        return [], 0, []
    columns = list(data[0])
    for i, row in enumerate(data):
        missing = [k for k in columns if k not in row]
        if missing:
            raise _bad(rel, f"row {i}: missing column(s) {', '.join(missing)}")
    return columns, len(data), [_sample_row(r) for r in data[:_SAMPLE_ROWS]]


def _delimited(path: Path, rel: str, delimiter: str) -> tuple[list[str], int, list[Any]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            raise _bad(rel, "empty file (no header row)") from None
        if not header or any(not h.strip() for h in header):
            raise _bad(rel, "line 1: the header row names every column (an empty name)")
        if len(set(header)) != len(header):
            raise _bad(rel, "line 1: the header row names a column twice")
        rows = 0
        sample: list[Any] = []
        try:
            for record in reader:
                if not record:
                    continue
                if len(record) != len(header):
                    raise _bad(
                        rel,
                        f"line {reader.line_num}: {len(record)} fields, the header has "
                        f"{len(header)}",
                    )
                rows += 1
                if len(sample) < _SAMPLE_ROWS:
                    sample.append(_sample_row(dict(zip(header, record, strict=True))))
        except csv.Error as exc:
            raise _bad(rel, f"line {reader.line_num}: {exc}") from None
    return header, rows, sample


def _text(path: Path, rel: str) -> tuple[list[str], int, list[Any]]:
    rows = 0
    sample: list[Any] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            rows += 1
            if len(sample) < _SAMPLE_ROWS:
                sample.append({"text": _short(line.rstrip("\n"))})
    return ["text"], rows, sample


def _parquet(path: Path, rel: str) -> tuple[list[str], int, list[Any]]:
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path)
        columns = list(meta.schema_arrow.names)
        rows = int(meta.metadata.num_rows)
        head = meta.read_row_group(0).slice(0, _SAMPLE_ROWS) if meta.num_row_groups else None
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise _bad(rel, f"not a readable parquet file ({exc})") from None
    sample = [_sample_row(r) for r in head.to_pylist()] if head is not None else []
    return columns, rows, json.loads(json.dumps(sample, default=str))


def _read(path: Path, rel: str, fmt: str) -> tuple[list[str], int, list[Any]]:
    try:
        if fmt == "jsonl":
            return _jsonl(path, rel)
        if fmt == "json":
            return _json(path, rel)
        if fmt in ("csv", "tsv"):
            return _delimited(path, rel, "," if fmt == "csv" else "\t")
        if fmt == "txt":
            return _text(path, rel)
        return _parquet(path, rel)
    except UnicodeDecodeError as exc:
        raise _bad(rel, f"not UTF-8 text (byte {exc.start})") from None


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def dataset_facts(folder: Path) -> ObjectFacts:
    """Check every file of an uploaded dataset; its facts, or ``Unprocessable``."""
    files = _files(folder)
    if not files:
        raise Unprocessable("file: no files uploaded", detail="invalid_dataset")
    formats = set()
    for p in files:
        fmt = DATASET_FORMATS.get(p.suffix.lower())
        if fmt is None:
            known = ", ".join(DATASET_FORMATS)
            raise _bad(p.relative_to(folder).as_posix(), f"unknown format; use one of {known}")
        formats.add(fmt)
    if len(formats) > 1:
        raise Unprocessable(
            f"file: a dataset's files share one format; got {', '.join(sorted(formats))}",
            detail="invalid_dataset",
        )
    fmt = formats.pop()
    columns: list[str] | None = None
    total = 0
    sample: list[Any] = []
    for p in files:
        rel = p.relative_to(folder).as_posix()
        cols, rows, head = _read(p, rel, fmt)
        if columns is None:
            columns = cols
        elif rows and cols != columns:
            raise _bad(rel, f"columns {cols} differ from the first file's {columns}")
        total += rows
        sample += head[: _SAMPLE_ROWS - len(sample)]
    if total == 0:
        raise Unprocessable("file: the dataset has no rows", detail="invalid_dataset")
    return ObjectFacts(
        format=fmt,
        columns=columns or [],
        rows=total,
        sample=sample,
        files=[p.relative_to(folder).as_posix() for p in files],
        bytes=sum(p.stat().st_size for p in files),
    )


def _json_object(path: Path, rel: str) -> dict[str, Any]:
    if not path.is_file():
        return {}
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise Unprocessable(f"{rel}: larger than {_MAX_JSON_BYTES} bytes", detail="invalid_model")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Unprocessable(f"{rel}: not JSON ({exc})", detail="invalid_model") from None
    if not isinstance(data, dict):
        raise Unprocessable(f"{rel}: expected a JSON object", detail="invalid_model")
    return data


def model_facts(folder: Path, *, allow_pickle_weights: bool = False) -> ObjectFacts:
    """Check an uploaded HF-layout model folder; its facts, or ``Unprocessable``."""
    files = _files(folder)
    names = {p.relative_to(folder).as_posix() for p in files}
    if "config.json" not in names:
        raise Unprocessable(
            "config.json: missing; upload an HF-layout folder (config.json, *.safetensors, "
            "tokenizer files)",
            detail="invalid_model",
        )
    config = _json_object(folder / "config.json", "config.json")
    if not isinstance(config.get("model_type"), str):
        raise Unprocessable("config.json: no model_type", detail="invalid_model")
    for name in ("config.json", "tokenizer_config.json"):
        if "auto_map" in _json_object(folder / name, name):
            raise Unprocessable(
                f"{name}: has auto_map: the model needs custom code (trust_remote_code), "
                "which this service never runs",
                detail="invalid_model",
            )
    weights = [n for n in names if n.endswith(".safetensors")]
    pickles = [n for n in names if n.endswith(_PICKLE_SUFFIXES)]
    if not weights and not (pickles and allow_pickle_weights):
        why = (
            "weights only in pickle files (.bin/.pt), which can run code when loaded; convert "
            "them to model.safetensors"
            if pickles
            else "no *.safetensors weights"
        )
        raise Unprocessable(f"model: {why}", detail="invalid_model")
    if not any(n in names for n in _TOKENIZER_FILES):
        raise Unprocessable(
            f"model: no tokenizer files (one of {', '.join(_TOKENIZER_FILES)})",
            detail="invalid_model",
        )
    return ObjectFacts(
        format="hf",
        columns=[],
        rows=None,
        sample=[{"model_type": config["model_type"]}],
        files=sorted(names),
        bytes=sum(p.stat().st_size for p in files),
    )
