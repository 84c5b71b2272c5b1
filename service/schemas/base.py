"""The schemas' common parts: strict requests (``_In``), responses read from rows (``_Out``),
the error body, and ``Utc``: SQLite hands back naive datetimes, which it reads as UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from service.db.sqltime import as_utc

__all__ = [
    "ErrorBody",
    "Name",
    "Utc",
]


def _as_utc(value: datetime) -> datetime:
    return as_utc(value).astimezone(UTC)  # naive (SQLite) is UTC; aware ones are converted


Utc = Annotated[datetime, AfterValidator(_as_utc)]
Name = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9._-]*$")]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class ErrorBody(_Out):
    detail: Any
    message: str
