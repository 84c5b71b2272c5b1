"""The published JobSpec schema: every field described, the committed schema and reference
page current, and the examples valid against the schema an editor would load."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from shunter.jobspec.parse import parse_body
from shunter.jobspec.schema import jobspec_json_schema

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
REGENERATE = ".venv/bin/python scripts/gen_jobspec_docs.py"


def _generator() -> Any:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_jobspec_docs
    finally:
        sys.path.pop(0)
    return gen_jobspec_docs


def _undescribed(node: Any, where: str) -> Iterator[str]:
    """Every property (at any depth, $defs included) whose schema has no description."""
    if isinstance(node, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for name, prop in props.items():
                if not (isinstance(prop, dict) and str(prop.get("description", "")).strip()):
                    yield f"{where}/properties/{name}"
        for key, value in node.items():
            yield from _undescribed(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _undescribed(value, f"{where}/{i}")


def test_every_property_has_a_description() -> None:
    missing = list(_undescribed(jobspec_json_schema(), "#"))
    assert not missing, "add a Field(description=...) in shunter/jobspec/spec.py for: " + ", ".join(
        missing
    )


def test_the_walk_finds_a_missing_description() -> None:
    schema = {"$defs": {"X": {"properties": {"a": {"type": "string"}, "b": {"description": "b"}}}}}
    assert list(_undescribed(schema, "#")) == ["#/$defs/X/properties/a"]


def test_committed_schema_and_reference_are_current(tmp_path: Path) -> None:
    written = _generator().write(tmp_path)
    assert {p.name for p in written} == {"jobspec.schema.json", "jobspec-reference.md"}
    for fresh in written:
        committed = DOCS / fresh.name
        assert committed.is_file(), f"docs/{fresh.name} is missing: run {REGENERATE}"
        assert committed.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8"), (
            f"docs/{fresh.name} is out of date with shunter/jobspec/spec.py: run {REGENERATE}"
        )


def test_reference_lists_every_field() -> None:
    schema = jobspec_json_schema()
    page = (DOCS / "jobspec-reference.md").read_text(encoding="utf-8")
    for node in [schema, *schema["$defs"].values()]:
        for name in node.get("properties", {}):
            assert f"| `{name}` |" in page, name


def _committed_validator() -> jsonschema.protocols.Validator:
    schema = json.loads((DOCS / "jobspec.schema.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_examples_point_editors_at_the_schema() -> None:
    assert EXAMPLES
    for path in EXAMPLES:
        hint = "# yaml-language-server: $schema=../docs/jobspec.schema.json"
        assert hint in path.read_text(encoding="utf-8").splitlines(), path.name
        assert (path.parent / "../docs/jobspec.schema.json").resolve().is_file()


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_valid_against_the_committed_schema(path: Path) -> None:
    spec = parse_body(path.read_bytes(), "application/yaml")
    errors = [e.message for e in _committed_validator().iter_errors(spec)]
    assert not errors, f"{path.name}: {errors}"


def test_the_schema_rejects_what_validation_rejects() -> None:
    spec = parse_body(EXAMPLES[0].read_bytes(), "application/yaml")
    validator = _committed_validator()
    for bad in (
        {**spec, "colour": "blue"},
        {**spec, "resources": {"num_workers": 0}},
        {**spec, "model": {**spec["model"], "task": "poetry"}},
        {k: v for k, v in spec.items() if k != "name"},
    ):
        assert list(validator.iter_errors(bad)), bad


def test_a_bare_path_data_source_is_valid() -> None:
    spec = parse_body(EXAMPLES[0].read_bytes(), "application/yaml")
    spec["data"] = {**spec["data"], "train": "sst2/train.tsv"}
    assert not list(_committed_validator().iter_errors(spec))
