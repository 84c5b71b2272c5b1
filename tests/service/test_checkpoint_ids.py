"""Checkpoints are addressed one way: the id ``GET /v1/jobs/{id}/checkpoints`` lists is the
name the download route takes (``step-N@A``); the step forms (``N``, ``step-N``) still work.
The checkpoint's consolidated model is arranged in its cache beside it (hf/ + hf.json, as
``service.jobs.checkpoint_models`` writes them), so no export runs here."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.service.svc_helpers import bearer, claim, internal, submit


def _cached_checkpoint(folder: Path, marker: str) -> None:
    (folder / "hf").mkdir(parents=True)
    manifest = json.dumps({"files": {}, "step": 2}).encode()
    (folder / "manifest.json").write_bytes(manifest)
    (folder / "hf" / "config.json").write_text(json.dumps({"marker": marker}))
    mark = {"manifest_sha256": hashlib.sha256(manifest).hexdigest()}
    (folder / "hf.json").write_text(json.dumps(mark))


def _config_in(tar_bytes: bytes) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        [member] = [m for m in tar.getmembers() if m.name.endswith("config.json")]
        f = tar.extractfile(member)
        assert f is not None
        loaded: dict[str, Any] = json.loads(f.read())
        return loaded


@pytest.fixture
def job(client: Any, db: Any, admin_token: str) -> dict[str, Any]:
    job: dict[str, Any] = submit(client, admin_token)
    number, token = claim(db, job["id"])
    folder = Path(job["spec"]["training"]["output_dir"]) / "checkpoint-2"
    _cached_checkpoint(folder, "step-2")
    r = client.post(
        internal(job["id"], number, "checkpoints"),
        json={"step": 2, "uri": str(folder), "bytes": 10, "metrics": {}, "verified": True},
        headers=bearer(token),
    )
    assert r.status_code == 200, r.text
    assert r.json()["id"] == f"step-2@{number}"
    return job


def test_a_checkpoint_downloads_by_the_id_the_list_gives(
    client: Any, admin_token: str, job: dict[str, Any]
) -> None:
    r = client.get(f"/v1/jobs/{job['id']}/checkpoints", headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    [listed] = r.json()["data"]
    assert listed["id"] == "step-2@1" and listed["step"] == 2
    for name in (listed["id"], "2", "step-2"):
        got = client.get(
            f"/v1/jobs/{job['id']}/checkpoints/{name}/download", headers=bearer(admin_token)
        )
        assert got.status_code == 200, (name, got.text)
        assert _config_in(got.content) == {"marker": "step-2"}


@pytest.mark.parametrize(
    ("name", "says"),
    [("step-3@1", "step 3 of attempt 1"), ("step-2@2", "step 2 of attempt 2"), ("3", "step 3")],
)
def test_an_unknown_checkpoint_is_409_naming_the_verified_steps(
    client: Any, admin_token: str, job: dict[str, Any], name: str, says: str
) -> None:
    r = client.get(f"/v1/jobs/{job['id']}/checkpoints/{name}/download", headers=bearer(admin_token))
    assert r.status_code == 409, r.text
    assert says in r.json()["message"] and "verified steps: [2]" in r.json()["message"]


def test_a_name_that_is_no_checkpoint_says_what_is_accepted(
    client: Any, admin_token: str, job: dict[str, Any]
) -> None:
    r = client.get(f"/v1/jobs/{job['id']}/checkpoints/latest/download", headers=bearer(admin_token))
    assert r.status_code == 409 and "step-N@A" in r.json()["message"], r.text
