"""``shunter validate`` (offline) and ``POST /v1/jobs`` give the same messages.

For every row of the spec owner's ``BAD_SPECS`` table, the spec is written to a YAML file
(what a user has) and checked both ways against the same data root: the CLI's ``--json``
error detail must equal the server's 422 ``detail``, and the human output must print the same
``loc: msg`` lines the CLI prints for a server rejection.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_server import LiveServer, live_server
from typer.testing import CliRunner

from service.cli import app
from service.cli.user_common import spec_error_lines
from service.client import APIError, BadRequest, Client, ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from spec_cases import BAD_SPECS, GOOD_SPEC, write_data_root


@pytest.fixture(scope="module")
def parity_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(tmp_path_factory.mktemp("parity"), data_setup=write_data_root) as server:
        yield server


@pytest.fixture(scope="module")
def parity_client(parity_server: LiveServer) -> Iterator[Client]:
    with parity_server.client() as c:
        yield c


def _server_error(client: Client, spec_path: Path) -> APIError:
    """POST the file as the user has it (YAML) and return the API's error."""
    with pytest.raises((ValidationError, BadRequest)) as info:
        client.submit(spec_path)
    return info.value


def _cli(spec_path: Path, root: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["validate", str(spec_path), "--data-root", str(root), *extra])


def test_good_spec_passes_both_ways(
    parity_server: LiveServer, parity_client: Client, tmp_path: Path
) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(GOOD_SPEC))
    result = _cli(path, parity_server.data_root, "--json")
    assert result.exit_code == 0, result.output
    local = json.loads(result.stdout)["spec"]
    job = parity_client.submit(path)
    # The same resolved spec, defaults filled; only the service's output_dir differs.
    assert job.spec["training"].pop("output_dir").startswith(str(parity_server.home))
    assert local["training"].pop("output_dir") is None
    assert job.spec == local


@pytest.mark.parametrize(
    ("raw", "loc", "phrase"), [row[1:] for row in BAD_SPECS], ids=[row[0] for row in BAD_SPECS]
)
def test_bad_spec_same_message(
    parity_server: LiveServer,
    parity_client: Client,
    tmp_path: Path,
    raw: dict[str, Any],
    loc: str,
    phrase: str,
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=False))
    server = _server_error(parity_client, path)

    as_json = _cli(path, parity_server.data_root, "--json")
    assert as_json.exit_code == 2, as_json.output
    local = json.loads(as_json.stderr)["error"]
    assert local["message"] == server.message
    if isinstance(server, ValidationError):
        assert local["detail"] == server.detail
        assert local["detail"][0]["loc"] == loc and phrase in local["detail"][0]["msg"]
    else:
        # Refused before spec validation (NaN, NUL: JSON storage cannot hold them); both
        # sides refuse the document with the body parser's words.
        assert server.status_code == 400 and local["detail"] == server.body["detail"]

    human = _cli(path, parity_server.data_root)
    assert human.exit_code == 2
    lines = (
        spec_error_lines(server.detail) if isinstance(server, ValidationError) else [server.message]
    )
    for line in lines:
        assert line in human.stderr
