"""Checkpoints on object storage (a real local S3 server): the controller verifies the stored
copy through the bucket; a worker's node-local view of one waits for the node's local rank 0
(what a node then fetches: ``test_node_cache.py``)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import S3Server, aws_env, running_s3

import storage
from service.errors import Unprocessable
from service.jobs.confine import confined
from trainer_core.manifest import write_manifest
from worker.checkpoint_callback import verify_stored
from worker.staging import localize


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture
def job_uri(s3: S3Server) -> str:
    return f"s3://{s3.bucket('t-' + secrets.token_hex(4))}/shunter/job-1"


def _checkpoint(base: Path) -> Path:
    base.mkdir(parents=True)
    (base / "model.safetensors").write_bytes(b"w" * 3000)
    (base / "trainer_state.json").write_text('{"step": 4}')
    write_manifest(base)
    return base


def test_a_stored_checkpoint_verifies(job_uri: str, tmp_path: Path) -> None:
    uri = storage.join(job_uri, "checkpoint-4")
    storage.upload_dir(_checkpoint(tmp_path / "checkpoint-4"), uri)
    assert verify_stored(uri) is None


def test_a_changed_or_partial_stored_checkpoint_does_not_verify(
    job_uri: str, tmp_path: Path
) -> None:
    uri = storage.join(job_uri, "checkpoint-4")
    storage.upload_dir(_checkpoint(tmp_path / "checkpoint-4"), uri)
    storage.write_bytes(storage.join(uri, "model.safetensors"), b"x" * 3000)
    assert verify_stored(uri) == "model.safetensors does not match its SHA-256"
    storage.write_bytes(storage.join(uri, "model.safetensors"), b"w" * 3000)
    storage.delete_tree(storage.join(uri, "trainer_state.json"))
    assert verify_stored(uri) == "trainer_state.json is missing"
    storage.delete_tree(storage.join(uri, "manifest.json"))
    assert verify_stored(uri) == "no manifest.json (incomplete write)"


def test_localize_gives_up_when_nobody_downloads(job_uri: str, tmp_path: Path) -> None:
    with pytest.raises(TimeoutError):
        localize(storage.join(job_uri, "checkpoint-2"), tmp_path, local_rank=1, timeout_s=0.3)
    assert localize("/nfs/job/checkpoint-2", tmp_path, local_rank=1) == Path(
        "/nfs/job/checkpoint-2"
    )


@pytest.mark.parametrize(
    "uri",
    [
        "s3://b/p/job-1x/checkpoint-4",
        "s3://b/p/job-1/../job-2/checkpoint-4",
        "s3://other/p/job-1/checkpoint-4",
        "/srv/p/job-1/checkpoint-4",
    ],
)
def test_reported_uris_stay_under_the_jobs_prefix(uri: str) -> None:
    with pytest.raises(Unprocessable):
        confined(uri, output_dir="s3://b/p/job-1", field="uri")
    ok = confined("s3://b/p/job-1/checkpoint-4", output_dir="s3://b/p/job-1", field="uri")
    assert ok == "s3://b/p/job-1/checkpoint-4"


def test_the_launcher_passes_the_store_env_to_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from launcher.ray_launcher import ecosystem_env

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    settings = SimpleNamespace(s3_endpoint_url="http://minio:9000")
    env = ecosystem_env(settings, default_hf_home=None)
    assert env["AWS_ACCESS_KEY_ID"] == "key" and env["AWS_SECRET_ACCESS_KEY"] == "secret"
    assert env["SHUNTER_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert "AWS_SESSION_TOKEN" not in env
