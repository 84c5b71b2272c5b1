"""One field of a spec document set by its dotted path (``training.learning_rate``): what
``shunter submit --set`` (``shunter.cli.overrides``) and ``POST /v1/jobs/{id}/clone``
(``service.jobs.reproduce``) both do."""

from __future__ import annotations

from typing import Any

__all__ = ["set_dotted"]


def set_dotted(doc: dict[str, Any], path: str, value: Any) -> str | None:
    """Set ``path`` in ``doc`` in place, making missing mappings on the way. Returns what is
    wrong with ``path`` in words (nothing is set then), or None."""
    keys = path.strip().split(".")
    if not all(k.strip() for k in keys):
        return "expected a dotted field name, e.g. training.seed"
    node = doc
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            where = ".".join(keys[: i + 1])
            return f"{where} is {child!r}, not a mapping"
        node = child
    node[keys[-1]] = value
    return None
