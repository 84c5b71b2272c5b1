"""``service.db.rows``: a read model takes its row's same-named fields and the given ones; a
given field's column is never read; a field the row lacks keeps its default."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import BaseModel

from service.db.rows import from_row, unix_seconds


class _Read(BaseModel):
    id: str
    size: int
    note: str = "none"
    spec: dict[str, int] | None = None


@dataclass(frozen=True, kw_only=True)
class _Info:
    id: str
    created_at: int


class _Row:
    id = "r1"
    size = 3
    other = "not a field"

    @property
    def spec(self) -> dict[str, int]:
        raise AssertionError("a given field's column is read")


def test_a_model_takes_the_rows_fields_and_the_given_ones() -> None:
    assert from_row(_Read, _Row(), spec=None) == _Read(id="r1", size=3, spec=None)
    assert from_row(_Read, _Row(), size=4, spec={"a": 1}).model_dump() == {
        "id": "r1",
        "size": 4,
        "note": "none",
        "spec": {"a": 1},
    }
    with pytest.raises(AssertionError, match="column is read"):
        from_row(_Read, _Row())


def test_a_dataclass_too_and_a_missing_field_is_an_error() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5)
    assert from_row(_Info, _Row(), created_at=unix_seconds(at)) == _Info(
        id="r1", created_at=int(at.replace(tzinfo=UTC).timestamp())
    )
    with pytest.raises(TypeError):
        from_row(_Info, _Row())  # no created_at on the row, none given


def test_unix_seconds_reads_a_naive_time_as_utc() -> None:
    naive = datetime(2026, 5, 1, 12, 0, 0)
    aware = naive.replace(tzinfo=timezone(timedelta(hours=2)))
    assert unix_seconds(naive) == 1_777_636_800
    assert unix_seconds(aware) == 1_777_636_800 - 7200
