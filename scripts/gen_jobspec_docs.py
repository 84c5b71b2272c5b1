"""Regenerate ``docs/jobspec.schema.json`` and ``docs/jobspec-reference.md`` from the JobSpec.

Both come from ``shunter.jobspec.schema.jobspec_json_schema()`` (the field descriptions in
``shunter/jobspec/spec.py``), never by hand. ``tests/jobspec/test_schema_docs.py``
regenerates them into a temporary folder and fails when the committed ones differ.

Usage: ``.venv/bin/python scripts/gen_jobspec_docs.py [--out-dir DIR]`` (default ``docs/``)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from shunter.jobspec.schema import jobspec_json_schema

REPO = Path(__file__).resolve().parents[1]
SCHEMA_FILE = "jobspec.schema.json"
REFERENCE_FILE = "jobspec-reference.md"
COMMAND = ".venv/bin/python scripts/gen_jobspec_docs.py"
_ROOT = "JobSpec"
_ANY_JSON = "JsonValue"


def render_schema(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def _ref_name(node: dict[str, Any]) -> str | None:
    ref = node.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _anchor(name: str) -> str:
    return name.lower()


def _type_of(node: dict[str, Any]) -> str:
    """A short type for a table cell: enums spelled out, objects linked to their section."""
    name = _ref_name(node)
    if name == _ANY_JSON:
        return "any JSON"
    if name is not None:
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in node:
        return " or ".join(_type_of(part) for part in node["anyOf"])
    if "enum" in node:
        return " | ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        return f"list of {_type_of(items)}" if isinstance(items, dict) else "list"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"map of string to {_type_of(values)}"
        return "object"
    if kind is None:
        return "any JSON"
    return str(kind)


def _bounds(node: dict[str, Any]) -> str:
    """The schema's own constraints on a field, so the page shows what the validator checks."""
    parts = []
    for key, sign in (
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
    ):
        if key in node:
            parts.append(f"{sign} {node[key]}")
    for key, word in (
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("maxProperties", "max keys"),
        ("pattern", "pattern"),
    ):
        if key in node:
            value = f"`{node[key]}`" if key == "pattern" else node[key]
            parts.append(f"{word} {value}")
    for part in node.get("anyOf", []):
        inner = _bounds(part)
        if inner:
            parts.append(inner)
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in prop:  # a default_factory: a nested object's defaults, or empty
        if _ref_name(prop) is not None:
            return "its fields' defaults"
        return "`[]`" if prop.get("type") == "array" else "`{}`"
    return f"`{json.dumps(prop['default'], ensure_ascii=False)}`"


def _section(name: str, node: dict[str, Any]) -> list[str]:
    required = set(node.get("required", []))
    lines = [f"## {name}", ""]
    doc = node.get("description")
    if doc:
        lines += [doc.strip(), ""]
    lines += ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for field, prop in node.get("properties", {}).items():
        row = (
            f"`{field}`",
            _type_of(prop),
            _default(prop, field in required),
            _bounds(prop),
            prop.get("description", ""),
        )
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return [*lines, ""]


def _referenced(node: Any) -> list[str]:
    """Names of the definitions a node refers to, in document order."""
    if isinstance(node, dict):
        found = [] if _ref_name(node) is None else [_ref_name(node)]
        for value in node.values():
            found += _referenced(value)
        return [n for n in found if n is not None]
    if isinstance(node, list):
        return [n for value in node for n in _referenced(value)]
    return []


def render_reference(schema: dict[str, Any]) -> str:
    """Markdown: the root object first, then each definition in the order it is first used."""
    defs: dict[str, Any] = schema.get("$defs", {})
    order = [_ROOT]
    for name in order:
        node = schema if name == _ROOT else defs[name]
        for ref in _referenced(node.get("properties", {})):
            if ref not in order and ref != _ANY_JSON:
                order.append(ref)
    head = [
        "# JobSpec reference",
        "",
        f"<!-- Generated by {COMMAND} from shunter/jobspec/spec.py; do not edit by hand. -->",
        "",
        "Every field of a JobSpec (v1): its type, default, bounds and meaning. The JSON Schema",
        f"is [`{SCHEMA_FILE}`]({SCHEMA_FILE}) (also served at `GET /v1/jobspec.schema.json`).",
        "Rules that involve several fields, and what the server checks at submit, are in",
        "[`jobspec.md`](jobspec.md). A data source may also be given as a bare path string.",
        "",
    ]
    body = [
        line for name in order for line in _section(name, schema if name == _ROOT else defs[name])
    ]
    return "\n".join(head + body).rstrip("\n") + "\n"


def write(out_dir: Path) -> list[Path]:
    """Write both files into ``out_dir``; the paths written."""
    schema = jobspec_json_schema()
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {SCHEMA_FILE: render_schema(schema), REFERENCE_FILE: render_reference(schema)}
    for name, text in files.items():
        (out_dir / name).write_text(text, encoding="utf-8")
    return [out_dir / name for name in files]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=REPO / "docs")
    args = parser.parse_args()
    for path in write(args.out_dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
