"""An elastic job's data order through the API (issue 30; ``shunter.jobspec.elastic``): the
attempt spec at each width carries ``resources.elastic_from`` (the trainer then reads whole
global batches: ``trainer_core.row_order``) and validates as a rigid spec; what would make
two widths read different rows is a 422 naming the field and the fix, and nothing is
stored: ``training.group_by_length`` on an elastic job, and ``resources.elastic_from`` on a
submitted spec (only the service sets it)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from svc_helpers import bearer, tiny_spec

from service.db.tables import Event, IdempotencyKey, Job
from shunter.jobspec import JobSpec, check
from shunter.jobspec.elastic import at_width, stored_at_width


def _elastic(**training: Any) -> dict[str, Any]:
    spec = tiny_spec()
    spec["resources"] = {"num_workers": {"min": 2, "max": 4}, "gpus_per_worker": 0}
    spec["distributed"] = {"strategy": "ddp"}
    spec["training"] = {**spec.get("training", {}), "gradient_accumulation_steps": 3, **training}
    return spec


def _rows(db: Any) -> tuple[int, int, int]:
    def count(model: Any) -> int:
        query = select(func.count()).select_from(model)
        return int(db.read(lambda s: s.execute(query).scalar_one()))

    return count(Job), count(Event), count(IdempotencyKey)


def test_each_widths_attempt_spec_carries_the_range_and_validates() -> None:
    spec = JobSpec.model_validate(_elastic())
    stored = spec.model_dump(mode="json")
    assert stored["resources"]["elastic_from"] is None
    for w in (2, 3, 4):
        got = stored_at_width(stored, w)
        assert got["resources"]["elastic_from"] == {"min": 2, "max": 4}
        assert got["resources"] == at_width(spec, w).model_dump(mode="json")["resources"]
        assert check(got, service_mode=False)[1] == []


@pytest.mark.parametrize(
    ("change", "field", "phrase"),
    [
        ({"group_by_length": True}, "training.group_by_length", "set it to false"),
        ("elastic_from", "resources.elastic_from", "give num_workers as {min, max}"),
    ],
    ids=["group-by-length", "elastic-from-submitted"],
)
def test_an_elastic_spec_two_widths_would_read_differently_is_a_422(
    client: Any, admin_token: str, db: Any, change: Any, field: str, phrase: str
) -> None:
    if change == "elastic_from":
        spec = _elastic()
        spec["resources"]["elastic_from"] = {"min": 2, "max": 4}
    else:
        spec = _elastic(**change)
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    assert field in r.text and phrase in r.text, r.json()
    assert _rows(db) == (0, 0, 0)


def test_a_rigid_spec_outside_its_elastic_from_is_refused() -> None:
    raw = JobSpec.model_validate(_elastic()).model_dump(mode="json")
    at3 = stored_at_width(raw, 3)
    at3["resources"]["num_workers"] = 5
    errors = check(at3, service_mode=False)[1]
    assert [e.loc for e in errors] == ["resources.elastic_from"]
