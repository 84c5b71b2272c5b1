"""Submit-time rules for pipeline and context parallelism (``shunter.jobspec.topology``):
each bad combination is one error naming its field, with the fix in the message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spec_cases import GOOD_SPEC, set_path, without, write_data_root

from service.jobs.admission import validate_spec
from shunter.jobspec import FieldError, SpecError

_LM = {"task": "causal-lm", "num_labels": None, "config_overrides": {"num_hidden_layers": 4}}
_LM_DATA = {"train": {"path": "corpus.txt"}, "eval": None, "label_field": None}
PP = "distributed.pipeline_parallel_size"
CP = "distributed.context_parallel_size"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_data_root(tmp_path_factory.mktemp("roots") / "root")


def _lm(**changes: Any) -> dict[str, Any]:
    base = set_path(GOOD_SPEC, model=_LM, data=_LM_DATA, resources__num_workers=4)
    return set_path(base, **changes)


def _pp(pp: int = 2, **changes: Any) -> dict[str, Any]:
    changes = {"training__gradient_accumulation_steps": 2, **changes}
    return _lm(distributed__pipeline_parallel_size=pp, **changes)


def _errors(raw: dict[str, Any], root: Path) -> list[FieldError]:
    with pytest.raises(SpecError) as info:
        validate_spec(raw, data_roots=[root])
    return info.value.errors


NOT_YET = "does not drive pipeline stages yet"


@pytest.mark.parametrize(
    "raw",
    [
        _pp(),
        _pp(distributed__pipeline_schedule="gpipe", training__gradient_accumulation_steps=1),
        _pp(4, distributed__pipeline_microbatches=4),
    ],
    ids=["1f1b", "gpipe", "pp4-microbatches"],
)
def test_a_valid_pipeline_layout_is_refused_only_as_not_wired_yet(
    raw: dict[str, Any], root: Path
) -> None:
    errors = _errors(raw, root)
    assert [e.loc for e in errors] == [PP] and NOT_YET in errors[0].message, errors


def test_a_valid_context_parallel_layout_is_refused_only_as_not_run_yet(root: Path) -> None:
    raw = _lm(distributed__context_parallel_size=2, resources__gpus_per_worker=1)
    errors = _errors(raw, root)
    assert [e.loc for e in errors] == [CP] and "does not run context parallelism yet" in errors[
        0
    ].message


def test_the_defaults_are_one_stage_and_no_context_split(root: Path) -> None:
    spec = validate_spec(_lm(), data_roots=[root])
    d = spec.distributed
    assert (d.pipeline_parallel_size, d.context_parallel_size) == (1, 1)
    assert (d.pipeline_schedule, d.pipeline_microbatches) == ("1f1b", None)


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("pp-not-dividing-workers", _pp(3, model__config_overrides={"num_hidden_layers": 3},
     distributed__pipeline_schedule="gpipe"), PP,
     "must divide resources.num_workers (4)"),
    ("pp-not-dividing-layers", _pp(2, model__config_overrides={"num_hidden_layers": 3}), PP,
     "must divide the decoder layers"),
    ("pp-not-dividing-local-config-layers", without(_pp(4, distributed__pipeline_schedule="gpipe"),
     "model.config_overrides.num_hidden_layers"), PP, "decoder layers (num_hidden_layers 2)"),
    ("pp-with-fsdp", _pp(distributed__strategy="fsdp"), PP, "strategy ddp only"),
    ("pp-with-deepspeed", _pp(distributed__strategy="deepspeed"), PP, "strategy ddp only"),
    ("pp-with-tp", _pp(distributed__strategy="fsdp+tp", distributed__tensor_parallel_size=2), PP,
     "strategy ddp only"),
    ("pp-with-lora", _pp(model__lora={"r": 4}), PP, "remove model.lora"),
    ("pp-not-causal-lm", set_path(GOOD_SPEC, resources__num_workers=4,
     distributed__pipeline_parallel_size=2, distributed__pipeline_schedule="gpipe"), PP,
     "causal-lm models only"),
    ("pp-1f1b-too-few-microbatches", _pp(training__gradient_accumulation_steps=1),
     "distributed.pipeline_microbatches", "at least pipeline_parallel_size (2)"),
    ("pp-schedule-without-pp", _lm(distributed__pipeline_schedule="gpipe"),
     "distributed.pipeline_schedule", "pipeline_parallel_size > 1"),
    ("pp-microbatches-without-pp", _lm(distributed__pipeline_microbatches=4),
     "distributed.pipeline_microbatches", "pipeline_parallel_size > 1"),
    ("cp-on-cpu", _lm(distributed__context_parallel_size=2), CP, "needs CUDA"),
    ("cp-not-dividing-max-length", _lm(distributed__context_parallel_size=2,
     resources__gpus_per_worker=1, data__max_length=130), CP,
     "2 x context_parallel_size (4) must divide data.max_length (130)"),
    ("cp-not-dividing-workers", _lm(distributed__context_parallel_size=3,
     resources__gpus_per_worker=1, data__max_length=132), CP,
     "must divide resources.num_workers (4)"),
    ("cp-with-deepspeed", _lm(distributed__context_parallel_size=2,
     distributed__strategy="deepspeed", resources__gpus_per_worker=1), CP,
     "not with strategy deepspeed"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "raw", "loc", "phrase"), BAD, ids=[r[0] for r in BAD])
def test_bad_layout(name: str, raw: dict[str, Any], loc: str, phrase: str, root: Path) -> None:
    errors = _errors(raw, root)
    assert {e.loc for e in errors} == {loc}, errors
    assert any(phrase in e.message for e in errors), errors
