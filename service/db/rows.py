"""A read model from a row: the fields a response object shares with a table row by name are
copied from the row; the others (computed, converted, or absent from the row) are given.

``from_row(ObjectInfo, row, created_at=unix_seconds(row.created_at))`` replaces a constructor
call that names every column twice (``id=row.id, name=row.name, ...``)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from service.db.sqltime import as_utc

__all__ = ["from_row", "unix_seconds"]

_T = TypeVar("_T")


def _field_names(cls: type[Any]) -> list[str]:
    if issubclass(cls, BaseModel):
        return list(cls.model_fields)
    return [f.name for f in dataclasses.fields(cls)]


def from_row(cls: type[_T], row: Any, /, **given: Any) -> _T:
    """``cls`` (a pydantic model or a dataclass) with ``given``, and every other field the row
    has an attribute of the same name for copied from it; a field it has not keeps its
    default. A given field's attribute is never read (a Core row may not have selected it)."""
    copied = {
        name: getattr(row, name)
        for name in _field_names(cls)
        if name not in given and hasattr(row, name)
    }
    return cls(**copied, **given)


def unix_seconds(at: datetime) -> int:
    """A database time (naive on SQLite: UTC) as whole unix seconds."""
    return int(as_utc(at).timestamp())
