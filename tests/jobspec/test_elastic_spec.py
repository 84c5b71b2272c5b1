"""Elastic ``resources.num_workers: {min, max}`` (``shunter.jobspec.elastic``): which
strategies may be elastic, the global batch kept by re-deriving gradient accumulation per
width, every width checked as a rigid spec; an int keeps its rigid meaning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spec_cases import GOOD_SPEC, set_path, write_data_root

from service.jobs.admission import validate_spec
from shunter.jobspec import FieldError, JobSpec, check
from shunter.jobspec.elastic import accumulation_at, at_width, start_width, stored_at_width
from shunter.jobspec.plan import plan_for


def _spec(workers: Any, accum: int = 3, **changes: Any) -> dict[str, Any]:
    return set_path(
        GOOD_SPEC,
        resources__num_workers=workers,
        training__gradient_accumulation_steps=accum,
        **changes,
    )


def _errors(raw: dict[str, Any]) -> list[FieldError]:
    return check(raw, service_mode=False)[1]


def test_a_range_is_elastic_and_an_int_stays_rigid() -> None:
    spec, errors = check(_spec({"min": 2, "max": 4}), service_mode=False)
    assert errors == [] and spec is not None
    r = spec.resources
    assert (r.elastic, r.min_workers, r.max_workers) == (True, 2, 4)
    assert spec.model_dump(mode="json")["resources"]["num_workers"] == {"min": 2, "max": 4}
    rigid, errors = check(_spec(4, accum=1), service_mode=False)
    assert errors == [] and rigid is not None
    assert (rigid.resources.elastic, rigid.resources.num_workers) == (False, 4)
    assert at_width(rigid, 2) is rigid


def test_the_global_batch_is_kept_at_every_width() -> None:
    spec = JobSpec.model_validate(_spec({"min": 2, "max": 4}))
    assert [accumulation_at(spec, w) for w in (2, 3, 4)] == [6, 4, 3]
    at3 = at_width(spec, 3)
    assert (at3.resources.num_workers, at3.training.gradient_accumulation_steps) == (3, 4)
    b = spec.training.per_device_train_batch_size
    assert {w * at_width(spec, w).training.gradient_accumulation_steps * b for w in (2, 3, 4)} == {
        12 * b
    }


def test_an_accumulation_that_does_not_split_evenly_is_refused_with_the_fix() -> None:
    errors = _errors(_spec({"min": 2, "max": 4}, accum=1))
    assert [e.loc for e in errors] == ["training.gradient_accumulation_steps"]
    assert "at 3 workers" in errors[0].message
    assert "multiple of 3" in errors[0].message
    assert _errors(_spec({"min": 2, "max": 4}, accum=3)) == []
    # {min: 4, max: 8}: 5, 6 and 7 workers need 8a / w whole: a multiple of 5 x 3 x 7.
    assert "multiple of 105" in _errors(_spec({"min": 4, "max": 8}, accum=2))[0].message


def test_a_range_needs_max_above_min() -> None:
    errors = _errors(_spec({"min": 4, "max": 4}))
    assert [e.loc for e in errors] == ["resources.num_workers"]
    assert "above min" in errors[0].message


def test_deepspeed_is_refused_as_elastic() -> None:
    errors = _errors(_spec({"min": 2, "max": 4}, distributed__strategy="deepspeed"))
    assert [e.loc for e in errors] == ["resources.num_workers"]
    assert "deepspeed" in errors[0].message and "fixed num_workers" in errors[0].message


def test_a_fixed_mesh_is_refused_unless_every_width_is_valid() -> None:
    tp = {"distributed__strategy": "tp", "distributed__tensor_parallel_size": 2}
    lm = {
        "model": {
            "task": "causal-lm",
            "num_labels": None,
            "config_overrides": {"model_type": "llama"},
        },
        "data": {"train": {"path": "corpus.txt"}, "eval": None, "label_field": None},
    }
    errors = _errors(_spec({"min": 2, "max": 4}, accum=3, **tp, **lm))
    assert [e.loc for e in errors] == ["distributed.tensor_parallel_size"]
    assert "at 3 workers" in errors[0].message
    # Widths 2 and 4 only would be fine, but a range holds every width between.
    assert _errors(_spec(4, accum=1, **tp, **lm)) == []


def test_the_memory_plan_is_made_at_min() -> None:
    spec = JobSpec.model_validate(_spec({"min": 2, "max": 4}, distributed__strategy="fsdp"))
    got = plan_for(spec)
    want = plan_for(at_width(spec, 2))
    assert got.memory == want.memory
    assert any("elastic" in n for n in got.notes)


def test_the_service_accepts_elastic_jobs_and_stores_them_as_a_range(tmp_path: Path) -> None:
    """The live loop resizes them (service.scheduler.resize): pass 2 keeps the range, and an
    attempt's driver gets the rigid spec at its width (``stored_at_width``)."""
    root = write_data_root(tmp_path / "root")
    spec = validate_spec(_spec({"min": 2, "max": 4}), data_roots=[root])
    stored = spec.model_dump(mode="json")
    assert stored["resources"]["num_workers"] == {"min": 2, "max": 4}
    assert start_width(stored["resources"]) == 2
    for w in (2, 3, 4):
        got = stored_at_width(stored, w)
        want = at_width(spec, w).model_dump(mode="json")
        assert got["resources"] == want["resources"] and got["training"] == want["training"]
    assert stored_at_width(stored, None) == stored  # an attempt older than widths
    with pytest.raises(ValueError, match="outside"):
        stored_at_width(stored, 5)
    rigid = validate_spec(_spec(4, accum=1), data_roots=[root]).model_dump(mode="json")
    assert start_width(rigid["resources"]) == 4 and stored_at_width(rigid, 4) == rigid
