"""Fuzzing ``POST /v1/jobs`` through the real app: never a 5xx, and nothing written on a 4xx.

The app runs in-process (``TestClient``) on a temp SQLite database with the in-memory
launcher and no scheduler. Bodies come from three generators: arbitrary bytes, valid specs
with random subtrees replaced, and the tables of bad specs and bad bodies; each is sent as
JSON and (where it is text) as YAML. A spec rejected by the API carries exactly the
``format_spec_errors`` message ``validate_spec`` gives offline.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobspec"))

from spec_cases import BAD_SPECS, GOOD_SPEC, write_data_root
from test_jsonbody import BAD_BODIES
from test_spec_property import JSON, mutated_specs

from service.app import create_app
from service.jobs.admission import validate_spec
from service.settings import Settings
from shunter.jobspec import SpecError, format_spec_errors
from shunter.jobspec.parse import BodyError, parse_body

_CONTENT_TYPES = ["application/json", "application/yaml", "text/plain", None]


class _Api:
    def __init__(self, client: TestClient, token: str, root: Path) -> None:
        self.client, self.root = client, root
        self.auth = {"Authorization": f"Bearer {token}"}

    def post(self, body: bytes, content_type: str | None) -> Any:
        headers = dict(self.auth)
        if content_type is not None:
            headers["Content-Type"] = content_type
        return self.client.post("/v1/jobs", content=body, headers=headers)

    def job_count(self) -> int:
        r = self.client.get("/v1/jobs", params={"limit": 1000}, headers=self.auth)
        assert r.status_code == 200, r.text
        return len(r.json()["data"])


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Api]:
    home = tmp_path_factory.mktemp("fuzz-home")
    root = write_data_root(home / "data")
    cfg = Settings(
        home=home,
        data_roots=[root],
        launcher="memory",
        run_scheduler=False,
        max_body_bytes=64 * 1024,
    )
    with TestClient(create_app(cfg)) as client:
        yield _Api(client, cfg.admin_token_path.read_text().strip(), root)


def _send_and_check(api: _Api, body: bytes, content_type: str | None) -> Any:
    before = api.job_count()
    r = api.post(body, content_type)
    assert r.status_code < 500, (r.status_code, r.text, body[:200])
    after = api.job_count()
    if r.status_code == 201:
        assert after == before + 1
    else:
        assert 400 <= r.status_code < 500, r.status_code
        assert after == before, "a rejected submission wrote a job"
        assert isinstance(r.json().get("message"), str)
    return r


_FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@_FUZZ
@given(body=st.binary(max_size=300), content_type=st.sampled_from(_CONTENT_TYPES))
def test_random_bytes_never_5xx(api: _Api, body: bytes, content_type: str | None) -> None:
    _send_and_check(api, body, content_type)


@_FUZZ
@given(doc=st.one_of(mutated_specs(), JSON), as_yaml=st.booleans())
def test_mutated_specs_never_5xx(api: _Api, doc: Any, as_yaml: bool) -> None:
    # YAML is a superset of JSON, so the JSON text is also a YAML body.
    body = json.dumps(doc).encode()
    _send_and_check(api, body, "application/yaml" if as_yaml else "application/json")


@pytest.mark.parametrize(
    ("name", "body", "content_type", "phrase"), BAD_BODIES, ids=[row[0] for row in BAD_BODIES]
)
def test_bad_bodies_are_400(
    api: _Api, name: str, body: bytes, content_type: str, phrase: str
) -> None:
    if len(body) > 64 * 1024:
        pytest.skip("over this app's body limit (413 is tested below)")
    r = _send_and_check(api, body, content_type)
    assert r.status_code == 400
    assert any(p in r.json()["message"] for p in phrase.split("|"))


@pytest.mark.parametrize(("name", "raw", "loc", "phrase"), BAD_SPECS, ids=[r[0] for r in BAD_SPECS])
def test_api_and_offline_validation_give_the_same_422(
    api: _Api, name: str, raw: dict[str, Any], loc: str, phrase: str
) -> None:
    body = json.dumps(raw).encode()
    try:
        parse_body(body, "application/json")
    except BodyError:
        pytest.skip("a NaN or NUL never reaches validation: the body parser refuses it (400)")
    with pytest.raises(SpecError) as info:
        validate_spec(raw, data_roots=[api.root])
    r = _send_and_check(api, body, "application/json")
    assert r.status_code == 422
    expected = format_spec_errors(info.value.errors)
    assert r.json()["message"] == expected["message"]
    assert r.json()["detail"] == expected["detail"]


def test_good_spec_as_json_and_yaml_is_201(api: _Api) -> None:
    r = _send_and_check(api, json.dumps(GOOD_SPEC).encode(), "application/json")
    assert r.status_code == 201 and r.json()["status"] == "queued"
    yaml_body = json.dumps({**GOOD_SPEC, "name": "as-yaml"}).encode()
    r = _send_and_check(api, yaml_body, "application/yaml")
    assert r.status_code == 201 and r.json()["spec"]["name"] == "as-yaml"


def test_oversized_body_is_413_and_writes_nothing(api: _Api) -> None:
    doc = {**GOOD_SPEC, "padding": "x" * (64 * 1024)}
    r = _send_and_check(api, json.dumps(doc).encode(), "application/json")
    assert r.status_code == 413


def test_unsupported_media_type_is_415(api: _Api) -> None:
    r = _send_and_check(api, json.dumps(GOOD_SPEC).encode(), "text/plain")
    assert r.status_code == 415
