"""Strict parsing of request bodies (JSON, or YAML sent as YAML) into a plain dict.

``parse_body(body, content_type)`` accepts ``application/json`` (also when no type is
given) and ``application/yaml`` / ``application/x-yaml`` / ``text/yaml``, UTF-8 only. The
result holds only what JSON can hold (dict with str keys, list, str, int, float, bool,
None), so it can be stored as JSON and in PostgreSQL ``text``/``jsonb`` as it is.

Exception tree::

    ValueError
     └── BodyError   .status: 415 (media type or charset), 413 (YAML over MAX_YAML_BYTES),
                     400 (a document we refuse to read), 422 (readable, but the top level
                     is not an object)

YAML numbers are read as YAML 1.1 reads them, plus ``5e-5`` (a float in YAML 1.2 and JSON).

400 covers: invalid UTF-8; NUL bytes, raw or escaped; lone surrogates (``"\\ud800"``);
NaN/Infinity (JSON's non-standard constants, YAML's ``.nan``/``.inf``, or a float that
overflows); integers with more than 18 digits (refused before Python builds them); nesting
deeper than 32; duplicate keys; YAML anchors/aliases (billion laughs), merge keys, tags
beyond str/int/float/bool/null/seq/map, and keys that are not scalars. A YAML scalar key
is taken as its text, as JSON keys are strings (``no:`` is the key "no", ``0:`` is "0").
Nothing here can raise anything else.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable
from typing import Any

import yaml

__all__ = [
    "JSON_TYPES",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_YAML_BYTES",
    "YAML_TYPES",
    "BodyError",
    "parse_body",
]

MAX_DEPTH = 32  # containers inside containers; the top-level object is depth 1
MAX_INT_DIGITS = 18  # fits in a signed 64-bit integer (PostgreSQL bigint)
# PyYAML builds Python objects node by node: ~2-4 s per MiB on these machines even with
# libyaml, against ~0.3 s for JSON. A JobSpec is a few KiB; larger YAML is refused (413).
MAX_YAML_BYTES = 256 * 1024
JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml"})


class BodyError(ValueError):
    """A request body was refused; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_body(body: bytes, content_type: str | None) -> dict[str, Any]:
    """Parse ``body`` by its media type into a JSON-like dict, or raise ``BodyError``."""
    media = _media_type(content_type)
    if media in YAML_TYPES and len(body) > MAX_YAML_BYTES:
        raise BodyError(413, f"YAML bodies are limited to {MAX_YAML_BYTES} bytes; send JSON")
    if b"\x00" in body:
        raise BodyError(400, "body contains a NUL byte")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(400, f"body is not valid UTF-8 (byte {exc.start})") from None
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark carries no meaning
    try:
        value = _parse_yaml(text) if media in YAML_TYPES else _parse_json(text)
    except RecursionError:
        raise BodyError(400, f"body is nested deeper than {MAX_DEPTH} levels") from None
    _check_value(value)
    if not isinstance(value, dict):
        raise BodyError(422, f"body must be an object, not {_kind(value)}")
    return value


def _media_type(content_type: str | None) -> str:
    if not content_type or not content_type.strip():
        return "application/json"
    media, *params = (part.strip() for part in content_type.split(";"))
    media = media.lower()
    if media not in JSON_TYPES | YAML_TYPES:
        allowed = ", ".join(sorted(JSON_TYPES | YAML_TYPES))
        raise BodyError(415, f"unsupported content type {media!r}; use one of {allowed}")
    for param in params:
        name, _, val = param.partition("=")
        if name.strip().lower() == "charset" and val.strip().strip('"').lower() not in {
            "utf-8",
            "utf8",
        }:
            raise BodyError(415, f"unsupported charset {val.strip()!r}; bodies are UTF-8")
    return media


# --- JSON -------------------------------------------------------------------------------


def _parse_json(text: str) -> Any:
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_object,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as exc:
        msg = f"invalid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
        raise BodyError(400, msg) from None


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BodyError(400, f"duplicate key {_show(key)}")
        out[key] = value
    return out


def _bounded_int(digits: str) -> int:
    # Called with the literal's text, so a 10,000-digit number is refused before int().
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise BodyError(400, f"integer with more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise BodyError(400, f"number {literal[:32]} overflows a float")
    return value


def _no_constant(name: str) -> Any:
    raise BodyError(400, f"{name} is not valid JSON; numbers must be finite")


# --- YAML -------------------------------------------------------------------------------

_ALLOWED_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")
)
# Implicit types JSON cannot hold or SafeLoader cannot build: dates, and `=` ("value").
_DROPPED_IMPLICIT = frozenset({"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"})


class _StrictConstructor(yaml.constructor.SafeConstructor):
    """SafeConstructor for JSON-like results: string keys, no merge keys, bounded ints."""

    def flatten_mapping(self, node: Any) -> None:
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise BodyError(400, f"YAML merge keys (<<) are not allowed{_where(key_node)}")

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Hashable, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise BodyError(400, f"expected a mapping{_where(node)}")
        self.flatten_mapping(node)
        out: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            # Keys are names, as in JSON: a scalar key is its text, so `no:` is "no" (not
            # false) and `0:` is "0". Sequences and mappings cannot be keys.
            if not isinstance(key_node, yaml.ScalarNode):
                raise BodyError(400, f"mapping keys must be strings{_where(key_node)}")
            key = str(key_node.value)
            if key in out:
                raise BodyError(400, f"duplicate key {_show(key)}{_where(key_node)}")
            out[key] = self.construct_object(value_node, deep=deep)
        return out

    def construct_yaml_int(self, node: Any) -> int:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise BodyError(400, f"integer with more than {MAX_INT_DIGITS} digits{_where(node)}")
        value: int = super().construct_yaml_int(node)
        return value


_StrictConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", _StrictConstructor.construct_yaml_int
)
_StrictConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:map", _StrictConstructor.construct_yaml_map
)


class _StrictResolver(yaml.resolver.Resolver):
    """YAML 1.1 implicit typing, except dates (and a bare ``=``), which stay strings."""


_StrictResolver.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _DROPPED_IMPLICIT]
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}
# YAML 1.1 needs a dot in a float (`5.0e-5`); YAML 1.2 and every JSON reader take `5e-5`. The
# spec's number fields are strict (a string is a 422), so read it as the float it means.
_StrictResolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _loader_class(*, prefer_c: bool = True) -> type[Any]:
    """libyaml's C parser when PyYAML has it (pure Python reads 1 MiB in ~10 s), else Python."""
    if prefer_c and yaml.__with_libyaml__:
        from yaml.cyaml import CParser  # type: ignore[attr-defined]

        class _CLoader(CParser, _StrictConstructor, _StrictResolver):
            def __init__(self, stream: str) -> None:
                CParser.__init__(self, stream)
                _StrictConstructor.__init__(self)
                _StrictResolver.__init__(self)

        return _CLoader

    class _PyLoader(
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.composer.Composer,
        _StrictConstructor,
        _StrictResolver,
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _StrictConstructor.__init__(self)
            _StrictResolver.__init__(self)

    return _PyLoader


_Loader = _loader_class()


def _check_events(text: str) -> None:
    """Refuse aliases, anchors, non-core tags and deep nesting from the flat event stream,
    before anything is composed (the composers recurse; aliases multiply work)."""
    loader = _Loader(text)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise BodyError(400, f"YAML anchors and aliases are not allowed{_where(event)}")
            tag = getattr(event, "tag", None)
            if tag is not None and tag != "!" and tag not in _ALLOWED_TAGS:
                raise BodyError(400, f"YAML tag {tag!r} is not allowed{_where(event)}")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise BodyError(400, f"body is nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        loader.dispose()


def _parse_yaml(text: str) -> Any:
    try:
        _check_events(text)
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):
            # PyYAML >= 6.0.3 refuses very deep flow collections in its scanner, before our
            # event check counts them: the same refusal, in our words.
            raise BodyError(400, f"body is nested deeper than {MAX_DEPTH} levels") from None
        raise BodyError(400, f"invalid YAML: {_one_line(exc)}") from None


def _where(thing: Any) -> str:
    mark = getattr(thing, "start_mark", None)
    return f" (line {mark.line + 1} column {mark.column + 1})" if mark is not None else ""


def _one_line(exc: yaml.YAMLError) -> str:
    return " ".join(str(exc).split())[:300]


# --- shared checks ----------------------------------------------------------------------


def _check_value(root: Any) -> None:
    """Depth, strings, numbers: the properties JSON storage needs, for both parsers."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise BodyError(400, f"body is nested deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    _check_text(key)
                stack.append((item, depth + 1))
        elif isinstance(value, str):
            _check_text(value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise BodyError(400, "NaN and infinite numbers are not allowed")
        elif isinstance(value, int) and not isinstance(value, bool):
            if len(str(abs(value))) > MAX_INT_DIGITS:
                raise BodyError(400, f"integer with more than {MAX_INT_DIGITS} digits")
        elif not (value is None or isinstance(value, bool | float)):
            raise BodyError(400, f"values of type {type(value).__name__} are not allowed")


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise BodyError(400, f"string {_show(text)} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BodyError(400, f"string {_show(text)} contains a lone surrogate") from None


def _show(text: str) -> str:
    return ascii(text[:40]) + ("..." if len(text) > 40 else "")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    names = {list: "an array", str: "a string", type(None): "null"}
    return names.get(type(value), "a number")
