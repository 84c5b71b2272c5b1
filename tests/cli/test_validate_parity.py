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

from shunter.cli import app
from shunter.cli.common import spec_error_lines
from shunter.client import APIError, BadRequest, Client, ValidationError
from shunter.jobspec.parse import BodyError, parse_body

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobspec"))

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


# Rows only the server can refuse (pass 2: data roots, paths, a local model's config). The
# offline validate accepts them; everything else must get the server's words offline.
SERVER_ONLY = {
    "data-path-missing",
    "model-outside-roots",
    "model-explicit-local-missing",
    "model-is-a-file",
    "model-without-config",
    "tp-not-dividing-heads",
    "tp-not-dividing-kv-heads",
    "tp-on-local-bert",  # the model family is read from the local config.json
    "tp-on-hub-gpt2",  # ... or guessed from a Hub id by the server
}


def _yaml_reads_otherwise(path: Path, raw: dict[str, Any]) -> bool:
    try:
        return parse_body(path.read_bytes(), "application/yaml") != raw
    except BodyError:  # refused as a document (NaN, NUL): both sides say so, as YAML
        return False


def _cli(spec_path: Path, root: Path, *extra: str) -> Any:
    del root  # offline validate is pass 1: no data roots
    return CliRunner().invoke(app, ["validate", str(spec_path), *extra])


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
    # Paths are resolved inside the data roots by the server only (pass 2).
    for spec in (job.spec, local):
        for key in ("name_or_path", "tokenizer"):
            spec["model"][key] = Path(spec["model"][key]).name
        for split in ("train", "eval"):
            if spec["data"].get(split):
                spec["data"][split]["path"] = Path(spec["data"][split]["path"]).name
    assert job.spec == local


@pytest.mark.parametrize(
    ("name", "raw", "loc", "phrase"), BAD_SPECS, ids=[row[0] for row in BAD_SPECS]
)
def test_bad_spec_same_message(
    parity_server: LiveServer,
    parity_client: Client,
    tmp_path: Path,
    name: str,
    raw: dict[str, Any],
    loc: str,
    phrase: str,
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=False))
    if _yaml_reads_otherwise(path, raw):
        # YAML cannot say this document (PyYAML writes the string '5e-5' unquoted, which is a
        # number in YAML 1.2): give it to both sides as the JSON a user would send.
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(raw))
    server = _server_error(parity_client, path)

    as_json = _cli(path, parity_server.data_root, "--json")
    if name in SERVER_ONLY:
        assert as_json.exit_code == 0, as_json.output
        assert isinstance(server, ValidationError) and server.detail[0]["loc"] == loc
        return
    assert as_json.exit_code == 2, as_json.output
    local = json.loads(as_json.stderr)["error"]
    assert local["message"] == server.message
    if isinstance(server, ValidationError):
        # Offline is pass 1: the server's errors, less those only pass 2 can find.
        assert local["detail"] == server.detail[: len(local["detail"])]
        assert local["detail"][0]["loc"] == loc and phrase in local["detail"][0]["msg"]
    else:
        # Refused before spec validation (NaN, NUL: JSON storage cannot hold them); both
        # sides refuse the document with the body parser's words.
        assert server.status_code == 400 and local["detail"] == server.body["detail"]

    human = _cli(path, parity_server.data_root)
    assert human.exit_code == 2
    lines = (
        spec_error_lines(local["detail"])
        if isinstance(server, ValidationError)
        else [server.message]
    )
    for line in lines:
        assert line in human.stderr
