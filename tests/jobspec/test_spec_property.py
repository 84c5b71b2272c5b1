"""Property: ``validate_spec`` on any JSON-like input returns a spec or raises ``SpecError``.

Never another exception (a 500 in the API). Two generators: arbitrary JSON documents, and a
valid spec with random subtrees replaced or keys added (which reaches the deep rules). A spec
that validates must validate again, from its stored JSON form, to the same spec.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_cases import GOOD_SPEC, set_path, write_data_root

from service.jobs.admission import validate_spec
from shunter.jobspec import SpecError

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["train.csv", "../x", "/etc", "tiny-llama", "org/m", "steps", "llama"])
)
JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=24,
)

# A valid spec touching most sections, so mutations land next to real fields.
_RICH = set_path(
    GOOD_SPEC,
    model__lora={"r": 4},
    training={"eval_strategy": "steps", "eval_steps": 10, "save_steps": 20, "warmup_ratio": 0.1},
    distributed={"strategy": "deepspeed", "deepspeed": {"stage": 2, "config": {}}},
)


def _key_paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths += _key_paths(value, (*prefix, key))
    return paths


_PATHS = _key_paths(_RICH)
_FIELD_NAMES = sorted({p[-1] for p in _PATHS} | {"tensor_parallel_size", "from_scratch", "hub"})


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec = copy.deepcopy(_RICH)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_PATHS))
        parent = spec
        for key in path[:-1]:
            if not isinstance(parent.get(key), dict):
                break
            parent = parent[key]
        else:
            action = draw(st.sampled_from(["replace", "delete", "add"]))
            if action == "replace":
                parent[path[-1]] = draw(JSON)
            elif action == "delete":
                parent.pop(path[-1], None)
            else:
                parent[draw(st.sampled_from(_FIELD_NAMES))] = draw(JSON)
    return spec


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_data_root(tmp_path_factory.mktemp("prop") / "root")


def _check(raw: Any, root: Path) -> None:
    try:
        spec = validate_spec(raw, data_roots=[root])
    except SpecError as exc:
        assert exc.errors and all(e.loc and e.message for e in exc.errors)
        return
    dumped = spec.model_dump(mode="json")
    assert validate_spec(dumped, data_roots=[root]).model_dump(mode="json") == dumped


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(raw=JSON)
def test_arbitrary_json_only_raises_spec_error(raw: Any, root: Path) -> None:
    _check(raw, root)


@_SETTINGS
@given(raw=mutated_specs())
def test_mutated_specs_only_raise_spec_error(raw: dict[str, Any], root: Path) -> None:
    _check(raw, root)
