"""Spec validation errors and the one 422 body both the API and the CLI print.

Exception tree::

    ValueError
     └── SpecError          .errors: list[FieldError]  (every problem found, not just the first)

``FieldError.loc`` is a dotted path into the spec (``training.learning_rate``,
``model.lora.target_modules.0``); ``"spec"`` names the document itself. Pydantic's errors are
translated here so that callers never see pydantic types, and an unknown key gets a
did-you-mean computed against the keys that object allows.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

__all__ = [
    "ROOT_LOC",
    "FieldError",
    "SpecError",
    "errors_from_pydantic",
    "format_spec_errors",
]

# The loc of an error about the whole document (e.g. "not an object").
ROOT_LOC = "spec"


@dataclass(frozen=True)
class FieldError:
    """One problem: where (dotted ``loc``) and what to change (``message``)."""

    loc: str
    message: str


class SpecError(ValueError):
    """A JobSpec was rejected; ``errors`` lists every problem found (never empty)."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        if not errors:
            raise ValueError("SpecError needs at least one FieldError")
        self.errors: list[FieldError] = list(errors)
        first = self.errors[0]
        super().__init__(f"{first.loc}: {first.message}")


def format_spec_errors(errors: Sequence[FieldError]) -> dict[str, Any]:
    """The 422 body: ``{"detail": [{"loc", "msg"}...], "message": "<loc>: <msg>"}``.

    ``message`` is the first error alone, for humans and one-line CLI output.
    """
    detail = [{"loc": e.loc, "msg": e.message} for e in errors]
    message = f"{errors[0].loc}: {errors[0].message}" if errors else ""
    return {"detail": detail, "message": message}


def errors_from_pydantic(
    exc: pydantic.ValidationError, root: type[pydantic.BaseModel]
) -> list[FieldError]:
    """Translate pydantic's errors into FieldErrors with dotted locs, deduplicated by loc."""
    out: list[FieldError] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        raw = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and raw:
            # The last part is the user's unknown key, whatever it looks like.
            prefix, owner = _walk_loc(raw[:-1], root)
            loc = [*prefix, raw[-1]]
            message = _unknown_field_message(str(raw[-1]), owner)
        else:
            loc, _ = _walk_loc(raw, root)
            message = _message(err)
        dotted = ".".join(str(part) for part in loc) or ROOT_LOC
        if dotted in seen:
            continue  # a union reports once per member; the first one is enough
        seen.add(dotted)
        out.append(FieldError(dotted, message))
    return out


# Strict types: what a field expected, in the document's (JSON/YAML) words.
_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "dict_type": "an object (mapping)",
    "list_type": "a list",
    "model_type": "an object (mapping)",
    "model_attributes_type": "an object (mapping)",
}


def _json_word(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if value is None:
        return "null"
    return "a list" if isinstance(value, list) else "an object"


def _message(err: Any) -> str:
    if err["type"] == "missing":
        return "required field is missing"
    expected = _EXPECTED.get(err["type"])
    if expected is not None:
        return f"expected {expected}, got {_json_word(err.get('input'))}"
    msg = str(err["msg"])
    # Our own validators raise ValueError; pydantic prefixes the text with "Value error, ".
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    return msg


# Names users bring from other tools that neither spelling nor substring would find.
_ALIASES = {
    "lr": "learning_rate",
    "model_name": "name_or_path",
    "model": "name_or_path",
    "num_gpus": "gpus_per_worker",
    "num_cpus": "cpus_per_worker",
    "text_column": "text_field",
    "label_column": "label_field",
    "peft": "lora",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "zero_stage": "stage",
    "rank": "r",
}


def _unknown_field_message(key: str, model: type[pydantic.BaseModel] | None) -> str:
    allowed = sorted(model.model_fields) if model is not None else []
    hints = _suggestions(key, allowed)
    if hints:
        return "unknown field; did you mean " + " or ".join(repr(h) for h in hints) + "?"
    if allowed:
        return "unknown field; allowed: " + ", ".join(allowed)
    return "unknown field"


def _suggestions(key: str, allowed: list[str]) -> list[str]:
    """At most two field names the user probably meant: alias, close spelling, or substring."""
    lowered = key.lower()
    alias = _ALIASES.get(lowered)
    if alias in allowed:
        return [alias]
    close = difflib.get_close_matches(lowered, allowed, n=1, cutoff=0.6)
    if close:
        return close
    if len(lowered) >= 4:  # "gpus" → gpus_per_worker, "epochs" → num_train_epochs
        return [name for name in allowed if lowered in name][:2]
    return []


def _walk_loc(
    raw_loc: Sequence[str | int], root: type[pydantic.BaseModel]
) -> tuple[list[str | int], type[pydantic.BaseModel] | None]:
    """Keep the loc parts that are field names or keys; drop pydantic's union-member tags.

    Returns the cleaned loc and the model class reached at its end (None once the path has
    left our models, e.g. inside ``config_overrides``).
    """
    loc: list[str | int] = []
    model: type[pydantic.BaseModel] | None = root
    for part in raw_loc:
        if model is not None and isinstance(part, str) and part in model.model_fields:
            loc.append(part)
            model = _model_of(model.model_fields[part].annotation)
        elif isinstance(part, int) or not _looks_like_tag(part):
            loc.append(part)
            model = None
    return loc, model


def _looks_like_tag(part: str) -> bool:
    # pydantic names union members by their schema: "str", "list[str]", "function-after[...]".
    return "[" in part or part in {"str", "int", "float", "bool", "dict", "list", "none"}


def _model_of(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The BaseModel class inside ``X``, ``X | None`` or ``Annotated[X, ...]``, else None."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None
