"""Strict body parsing: every class of bad input gets its 4xx, and nothing else escapes."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shunter.jobspec import parse as jsonbody
from shunter.jobspec.parse import MAX_DEPTH, MAX_YAML_BYTES, BodyError, parse_body

JSON_T = "application/json"
YAML_T = "application/yaml"


def _refused(body: bytes, content_type: str | None = JSON_T) -> BodyError:
    with pytest.raises(BodyError) as info:
        parse_body(body, content_type)
    return info.value


def _nested(depth: int) -> bytes:
    """A JSON object whose containers nest ``depth`` levels deep (the top object is 1)."""
    return b'{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


# --- what is accepted -----------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "application/json",
        "Application/JSON; charset=UTF-8",
        'application/json;charset="utf-8"',
    ],
)
def test_json_content_types(content_type: str | None) -> None:
    assert parse_body(b'{"a": [1, 2.5, true, null, "x"]}', content_type) == {
        "a": [1, 2.5, True, None, "x"]
    }


@pytest.mark.parametrize("content_type", ["application/yaml", "application/x-yaml", "text/yaml"])
def test_yaml_content_types_give_the_json_result(content_type: str) -> None:
    body = b"name: x\nmodel: {task: causal-lm}\nlist: [1, 2.5, true, null, x]\n"
    expected = {"name": "x", "model": {"task": "causal-lm"}, "list": [1, 2.5, True, None, "x"]}
    assert parse_body(body, content_type) == expected


def test_yaml_keeps_only_json_types() -> None:
    body = b'date: 2024-01-01\neq: =\nstr: !!str 123\n0: negative\n"1": positive\nno: false\n~: 1\n'
    got = parse_body(body, YAML_T)
    # Dates stay strings; a scalar key is its text (JSON keys are strings): 0 → "0", no → "no".
    assert got == {
        "date": "2024-01-01",
        "eq": "=",
        "str": "123",
        "0": "negative",
        "1": "positive",
        "no": False,
        "~": 1,
    }
    assert json.loads(json.dumps(got)) == got


def test_limits_are_inclusive() -> None:
    assert parse_body(_nested(MAX_DEPTH), JSON_T)
    assert (
        parse_body(b'{"a": 999999999999999999, "b": -999999999999999999}', JSON_T)["a"]
        == 10**18 - 1
    )
    assert parse_body(b"a: 999999999999999999", YAML_T) == {"a": 10**18 - 1}


def test_byte_order_mark_is_ignored() -> None:
    assert parse_body(b'\xef\xbb\xbf{"a": 1}', JSON_T) == {"a": 1}


# --- media types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/xml", "multipart/form-data", "application/json; charset=latin-1"],
)
def test_unsupported_media_types_are_415(content_type: str) -> None:
    err = _refused(b'{"a": 1}', content_type)
    assert err.status == 415


def test_large_yaml_is_413_but_large_json_is_read() -> None:
    doc = {"a": ["x" * 100] * 3000}  # ~310 KiB
    body = json.dumps(doc).encode()
    assert len(body) > MAX_YAML_BYTES
    assert parse_body(body, JSON_T) == doc
    err = _refused(body, YAML_T)
    assert err.status == 413 and "send JSON" in err.message


# --- bad bytes and bad documents: 400 ---------------------------------------------------

BAD_BODIES: list[tuple[str, bytes, str, str]] = [
    ("invalid-utf8", b'{"a": "\xff"}', JSON_T, "not valid UTF-8"),
    ("overlong-utf8", b'{"a": "\xc0\xaf"}', JSON_T, "not valid UTF-8"),
    ("utf8-encoded-surrogate", b'{"a": "\xed\xa0\x80"}', JSON_T, "not valid UTF-8"),
    ("nul-byte", b'{"a": "x\x00"}', JSON_T, "NUL byte"),
    ("nul-byte-yaml", b"a: x\x00", YAML_T, "NUL byte"),
    ("nul-escape", b'{"a": "x\\u0000"}', JSON_T, "NUL character"),
    ("nul-escape-in-key", b'{"a\\u0000": 1}', JSON_T, "NUL character"),
    ("nul-escape-yaml", b'a: "x\\0"', YAML_T, "NUL character"),
    ("lone-surrogate", b'{"a": "\\ud800"}', JSON_T, "lone surrogate"),
    ("lone-low-surrogate-in-list", b'{"a": ["ok", "\\udfff"]}', JSON_T, "lone surrogate"),
    ("lone-surrogate-key", b'{"\\ud83d": 1}', JSON_T, "lone surrogate"),
    (
        "lone-surrogate-yaml",
        b'a: "\\ud800"',
        YAML_T,
        "lone surrogate|invalid Unicode character escape",
    ),  # libyaml refuses it itself
    ("nan", b'{"a": NaN}', JSON_T, "NaN is not valid JSON"),
    ("infinity", b'{"a": Infinity}', JSON_T, "Infinity is not valid JSON"),
    ("minus-infinity", b'{"a": -Infinity}', JSON_T, "-Infinity is not valid JSON"),
    ("float-overflow", b'{"a": 1e400}', JSON_T, "overflows a float"),
    ("yaml-nan", b"a: .nan", YAML_T, "NaN and infinite"),
    ("yaml-inf", b"a: [-.inf]", YAML_T, "NaN and infinite"),
    ("int-19-digits", b'{"a": 1000000000000000000}', JSON_T, "more than 18 digits"),
    ("negative-int-19-digits", b'{"a": -1000000000000000000}', JSON_T, "more than 18 digits"),
    ("yaml-int-19-digits", b"a: 1_000_000_000_000_000_000", YAML_T, "more than 18 digits"),
    ("too-deep", _nested(MAX_DEPTH + 1), JSON_T, f"deeper than {MAX_DEPTH}"),
    ("far-too-deep", b"[" * 200_000 + b"]" * 200_000, JSON_T, f"deeper than {MAX_DEPTH}"),
    ("yaml-too-deep", b"a: " + b"[" * 40 + b"]" * 40, YAML_T, f"deeper than {MAX_DEPTH}"),
    ("yaml-far-too-deep", b"a: " + b"[" * 50_000, YAML_T, f"deeper than {MAX_DEPTH}"),
    ("duplicate-key", b'{"a": 1, "a": 2}', JSON_T, "duplicate key 'a'"),
    ("nested-duplicate-key", b'{"a": {"b": 1, "b": 1}}', JSON_T, "duplicate key 'b'"),
    ("yaml-duplicate-key", b"a: 1\nb: 2\na: 3\n", YAML_T, "duplicate key 'a' (line 3"),
    ("yaml-int-key-duplicates-string", b'0: a\n"0": b\n', YAML_T, "duplicate key '0'"),
    ("yaml-alias", b"a: &x [1, 2]\nb: *x\n", YAML_T, "anchors and aliases"),
    ("yaml-anchor-alone", b"a: &x 1\n", YAML_T, "anchors and aliases"),
    ("yaml-merge-key", b"a:\n  <<: {b: 1}\n", YAML_T, "merge keys"),
    ("yaml-python-tag", b"a: !!python/object/apply:os.system [echo hi]", YAML_T, "tag"),
    ("yaml-binary-tag", b"a: !!binary aGk=", YAML_T, "tag"),
    ("yaml-set-tag", b"a: !!set {x}", YAML_T, "tag"),
    ("yaml-timestamp-tag", b"a: !!timestamp 2024-01-01", YAML_T, "tag"),
    ("yaml-local-tag", b"a: !mine x", YAML_T, "tag"),
    ("yaml-map-key", b"? {a: 1}\n: 1", YAML_T, "keys must be strings"),
    ("yaml-list-key", b"? [a]\n: 1", YAML_T, "keys must be strings"),
    ("yaml-two-documents", b"a: 1\n---\nb: 2\n", YAML_T, "invalid YAML"),
    ("yaml-syntax", b"a: [1, 2\n", YAML_T, "invalid YAML"),
    ("json-syntax", b'{"a": 1,}', JSON_T, "invalid JSON"),
    ("json-empty", b"", JSON_T, "invalid JSON"),
    ("json-single-quotes", b"{'a': 1}", JSON_T, "invalid JSON"),
]


@pytest.mark.parametrize(
    ("name", "body", "content_type", "phrase"), BAD_BODIES, ids=[row[0] for row in BAD_BODIES]
)
def test_bad_bodies_are_400(name: str, body: bytes, content_type: str, phrase: str) -> None:
    err = _refused(body, content_type)
    assert err.status == 400
    assert any(p in err.message for p in phrase.split("|")), err.message


_YAML_ROWS = [row for row in BAD_BODIES if row[2] == YAML_T]


@pytest.mark.parametrize(
    ("name", "body", "content_type", "phrase"), _YAML_ROWS, ids=[row[0] for row in _YAML_ROWS]
)
def test_pure_python_yaml_refuses_the_same(
    monkeypatch: pytest.MonkeyPatch, name: str, body: bytes, content_type: str, phrase: str
) -> None:
    # Where PyYAML lacks libyaml the Python parser runs; it must refuse the same bodies.
    monkeypatch.setattr(jsonbody, "_Loader", jsonbody._loader_class(prefer_c=False))
    err = _refused(body, content_type)
    assert err.status == 400
    assert any(p in err.message for p in phrase.split("|")), err.message


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    started = time.perf_counter()
    err = _refused("\n".join(lines).encode(), YAML_T)
    assert err.status == 400 and "anchors and aliases" in err.message
    assert time.perf_counter() - started < 5  # refused at the first anchor, not expanded


def test_huge_integer_is_refused_before_conversion() -> None:
    # 100,000 digits: int() would raise its own ValueError (the 4,300-digit limit) if the
    # hook let it run; the hook refuses on length first.
    err = _refused(b'{"a": ' + b"7" * 100_000 + b"}", JSON_T)
    assert err.status == 400 and "more than 18 digits" in err.message
    err = _refused(b"a: " + b"7" * 100_000, YAML_T)
    assert err.status == 400 and "more than 18 digits" in err.message


# --- readable but not an object: 422 ----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "kind"),
    [
        (b"[1, 2]", JSON_T, "an array"),
        (b'"spec"', JSON_T, "a string"),
        (b"3", JSON_T, "a number"),
        (b"true", JSON_T, "a boolean"),
        (b"null", JSON_T, "null"),
        (b"", YAML_T, "null"),
        (b"- a\n- b\n", YAML_T, "an array"),
        (b"just text", YAML_T, "a string"),
    ],
)
def test_top_level_must_be_an_object(body: bytes, content_type: str, kind: str) -> None:
    err = _refused(body, content_type)
    assert (err.status, err.message) == (422, f"body must be an object, not {kind}")


# --- property: nothing but BodyError, and results are JSON ---------------------------------


def _assert_json_like(value: Any) -> None:
    assert json.loads(json.dumps(value, allow_nan=False)) == value


@settings(max_examples=400, deadline=None)
@given(body=st.binary(max_size=200), content_type=st.sampled_from([JSON_T, YAML_T]))
def test_arbitrary_bytes_only_raise_body_error(body: bytes, content_type: str) -> None:
    try:
        _assert_json_like(parse_body(body, content_type))
    except BodyError as err:
        assert err.status in {400, 422}


_YAMLISH = st.text(
    alphabet=st.sampled_from(list("ab: -[]{},&*!<>?~.\"'\n0123456789eE+\\u#%|")), max_size=80
)


@settings(max_examples=400, deadline=None)
@given(text=_YAMLISH, content_type=st.sampled_from([JSON_T, YAML_T]))
def test_syntax_soup_only_raises_body_error(text: str, content_type: str) -> None:
    try:
        _assert_json_like(parse_body(text.encode(), content_type))
    except BodyError as err:
        assert err.status in {400, 422}
