"""``--set a.b.c=value`` overrides applied to a spec dict before it is validated or sent.

Values are YAML scalars (``true``, ``null``, ``16``, ``"text"``, ``[q_proj, v_proj]``), with one
fix: PyYAML reads ``3e-5`` (no dot) as a string, but everyone means the float, so a string
that is a valid float literal becomes a float.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

import yaml

from shunter.jobspec.dotted import set_dotted

__all__ = ["OverrideError", "apply_overrides", "parse_value"]

_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)$")


class OverrideError(ValueError):
    """A ``--set`` item is malformed or walks into a non-mapping."""


def parse_value(text: str) -> Any:
    """Parse one override value as a YAML scalar/flow value (see module docstring)."""
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    return value


def apply_overrides(spec: dict[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``spec`` with each ``dotted.path=value`` set; missing mappings are made."""
    out = copy.deepcopy(spec)
    for item in items:
        path, sep, raw = item.partition("=")
        problem = (
            set_dotted(out, path, parse_value(raw))
            if sep and path.strip()
            else "expected dotted.path=value, e.g. training.seed=1"
        )
        if problem is not None:
            raise OverrideError(f"--set {item!r}: {problem}")
    return out
