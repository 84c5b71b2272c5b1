"""Object storage that fails (issue 32, item 2), against a real local S3 server behind a
fault-injecting proxy (``tests/s3_faults.py``: 20% of requests answered 503 SlowDown, reset,
stalled then dropped, or cut half-way through the answer; seeded). The AWS SDK's own retries
are off here (``SHUNTER_S3_MAX_ATTEMPTS=1``), so every fault reaches ``storage.objects``: uploads
and downloads still complete and verify, a checkpoint read through a node's cache verifies
block by block, a user's tar download is whole or raises (never short and clean), and a dead
endpoint ends in ``StorageUnavailable`` (``storage_unavailable``) once the bound passes."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import socket
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_faults import S3Faults
from s3_server import S3Server, aws_env, running_s3

import storage
from service.jobs.download import tar_size, tar_stream
from trainer_core.manifest import file_table, write_manifest
from worker.checkpoint_callback import verify_stored
from worker.classify import classify
from worker.staging import cached, localize

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server:
        yield server


@pytest.fixture
def faults(s3: S3Server) -> Iterator[S3Faults]:
    """20% of requests fail; the SDK does not retry; our layer has 60 s to get through."""
    with S3Faults(s3.endpoint, rate=0.2, seed=32, stall_s=0.5) as proxy:
        env = {
            **s3.env,
            "AWS_ENDPOINT_URL": proxy.endpoint,
            "SHUNTER_S3_MAX_ATTEMPTS": "1",
            "SHUNTER_STORAGE_RETRY_S": "60",
        }
        with aws_env(env):
            yield proxy


@pytest.fixture
def bucket(s3: S3Server) -> str:
    return f"s3://{s3.bucket('f-' + secrets.token_hex(4))}/shunter/job-1"


def _checkpoint(base: Path, *, block: int | None = None) -> dict[str, bytes]:
    """A checkpoint directory: a 12 MiB shard (multipart upload, two range reads), a small
    file, an empty one, and its manifest."""
    files = {
        "model.safetensors": os.urandom(12 * MiB + 123),
        "trainer_state.json": b'{"step": 4}',
        "empty.json": b"",
    }
    base.mkdir(parents=True)
    for rel, data in files.items():
        (base / rel).write_bytes(data)
    write_manifest(base, file_table(base, block_size=block) if block else None)
    return files


def _injected(proxy: S3Faults) -> int:
    return sum(proxy.counts[k] for k in ("503", "reset", "stall", "cut"))


def test_upload_and_download_complete_and_verify_under_faults(
    faults: S3Faults, bucket: str, tmp_path: Path
) -> None:
    files = _checkpoint(tmp_path / "checkpoint-4")
    uri = storage.join(bucket, "checkpoint-4")
    storage.upload_dir(tmp_path / "checkpoint-4", uri)
    assert verify_stored(uri) is None  # every file's size and SHA-256, read through faults
    local = storage.download_dir(uri, tmp_path / "back")
    for rel, data in files.items():
        assert (local / rel).read_bytes() == data
    assert _injected(faults) >= 5, faults.counts  # the faults happened, and were lived through
    assert {"503", "reset", "cut"} <= {k for k, n in faults.counts.items() if n}


def test_node_cache_fetches_verified_blocks_under_faults(
    s3: S3Server, faults: S3Faults, bucket: str, tmp_path: Path
) -> None:
    files = _checkpoint(tmp_path / "checkpoint-4", block=MiB)
    uri = storage.join(bucket, "checkpoint-4")
    storage.upload_dir(tmp_path / "checkpoint-4", uri)
    view = cached(localize(uri, tmp_path / "node" / "resume", local_rank=0))
    assert view is not None and view.problem() is None
    for rel, data in files.items():
        assert view.fetch(rel).read_bytes() == data  # each block hashed before it is marked
    assert _injected(faults) >= 3, faults.counts


def test_a_user_download_under_faults_is_whole(
    faults: S3Faults, bucket: str, tmp_path: Path
) -> None:
    files = _checkpoint(tmp_path / "final")
    uri = storage.join(bucket, "final")
    storage.upload_dir(tmp_path / "final", uri)
    body = b"".join(tar_stream(uri, "job-1-final"))
    assert len(body) == tar_size(uri, "job-1-final")  # the route's Content-Length
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        for rel, data in files.items():
            member = tar.extractfile(f"job-1-final/{rel}")
            assert member is not None and member.read() == data
    assert _injected(faults) >= 3, faults.counts


def test_a_user_download_the_store_breaks_raises_never_ends_short(
    faults: S3Faults, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _checkpoint(tmp_path / "final")
    uri = storage.join(bucket, "final")
    storage.upload_dir(tmp_path / "final", uri)
    expected = tar_size(uri, "job-1-final")
    monkeypatch.setenv("SHUNTER_STORAGE_RETRY_S", "1")
    sent = 0
    with pytest.raises(storage.StorageUnavailable, match="SHUNTER_STORAGE_RETRY_S"):
        for chunk in tar_stream(uri, "job-1-final"):
            sent += len(chunk)
            faults.down = True  # the store goes away after the first piece went out
    assert 0 < sent < expected  # the server aborts; the client sees less than announced


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_dead_endpoint_is_storage_unavailable_after_the_bound(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**s3.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}"}
    with aws_env({**env, "SHUNTER_S3_MAX_ATTEMPTS": "1", "SHUNTER_STORAGE_RETRY_S": "1"}):
        for call in (
            lambda: storage.list_files("s3://b/x"),
            lambda: storage.read_bytes("s3://b/x/manifest.json"),
            lambda: storage.write_bytes("s3://b/x/probe", b"ok"),
        ):
            with pytest.raises(storage.StorageUnavailable) as raised:
                call()
            info = classify(raised.value)
            assert info.type == "storage_unavailable", info
            assert "1 s (SHUNTER_STORAGE_RETRY_S)" in info.message


def test_a_store_that_comes_back_within_the_bound_is_not_an_outage(
    faults: S3Faults, bucket: str, tmp_path: Path
) -> None:
    import threading

    faults.down = True  # every request 503 for a while, then the store answers again
    threading.Timer(1.5, lambda: setattr(faults, "down", False)).start()
    storage.write_bytes(storage.join(bucket, "probe"), b"ok")
    assert storage.read_bytes(storage.join(bucket, "probe")) == b"ok"
    assert faults.counts["down"] >= 2


@pytest.mark.parametrize(
    ("exc", "type_"),
    [
        (storage.StorageUnavailable("object storage unavailable: ..."), "storage_unavailable"),
        # Ray Train's own upload: pyarrow's error once the SDK's retries are spent.
        (OSError("When uploading part for key 'x': AWS Error SLOW_DOWN during UploadPart operation: Please reduce your request rate."), "storage_unavailable"),  # noqa: E501
        (OSError("AWS Error NETWORK_CONNECTION during PutObject operation: curlCode: 7"), "storage_unavailable"),  # noqa: E501
        # A refusal is not an outage: no retry mends it.
        (OSError("AWS Error ACCESS_DENIED during PutObject operation: Access Denied"), "internal"),
        (OSError("disk full"), "internal"),
    ],
)  # fmt: skip
def test_classify_storage_errors(exc: BaseException, type_: str) -> None:
    assert classify(exc).type == type_


def test_sha_of_what_the_proxy_forwards_is_untouched(
    faults: S3Faults, bucket: str, tmp_path: Path
) -> None:
    """The proxy changes nothing it lets through (a fault is a refusal, a reset or a cut)."""
    data = os.urandom(3 * MiB)
    storage.write_bytes(storage.join(bucket, "blob"), data)
    got = hashlib.sha256(storage.read_bytes(storage.join(bucket, "blob"), max_bytes=4 * MiB))
    assert got.hexdigest() == hashlib.sha256(data).hexdigest()


def test_tar_size_is_the_stream_length_for_a_local_dir(tmp_path: Path) -> None:
    """The route's Content-Length for a model on a shared filesystem (a long name takes a PAX
    header: the length counts it)."""
    _checkpoint(tmp_path / "final")
    (tmp_path / "final" / ("n" * 120 + ".json")).write_text("{}")
    body = b"".join(tar_stream(tmp_path / "final", "job-1-final"))
    assert len(body) == tar_size(tmp_path / "final", "job-1-final")
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert len(tar.getnames()) == 5
