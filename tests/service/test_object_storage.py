"""``storage`` against a real local S3 server (moto), and on a local path: the same
calls give the same answers on both, which is what the workers and the API rely on."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import S3Server, aws_env, running_s3

import storage


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture
def s3_root(s3: S3Server) -> str:
    bucket = s3.bucket("t-" + secrets.token_hex(4))
    return f"s3://{bucket}/shunter"


@pytest.fixture(params=["s3", "local"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "storage")
    return str(request.getfixturevalue("s3_root"))


def _tree(base: Path) -> Path:
    (base / "sub").mkdir(parents=True)
    (base / "a.json").write_text('{"step": 4}')
    (base / "sub" / "b.bin").write_bytes(bytes(range(256)) * 9)
    return base


def test_upload_list_download_delete(root: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    ckpt = storage.join(root, "job1", "checkpoint-4")
    storage.upload_dir(src, ckpt)
    assert storage.list_files(ckpt) == [("a.json", 11), ("sub/b.bin", 256 * 9)]
    assert storage.read_bytes(storage.join(ckpt, "a.json")) == b'{"step": 4}'
    got = storage.download_dir(ckpt, tmp_path / "dl")
    assert (got / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert b"".join(storage.open_read(storage.join(ckpt, "sub", "b.bin"))) == bytes(range(256)) * 9
    # A checkpoint's downloadable model (hf/, hf.json) is no resume input: left out.
    storage.write_bytes(storage.join(ckpt, "hf", "model.safetensors"), b"m")
    storage.write_bytes(storage.join(ckpt, "hf.json"), b"{}")
    resume = storage.download_dir(ckpt, tmp_path / "resume", skip=storage.CHECKPOINT_MODEL_FILES)
    assert sorted(str(p.relative_to(resume)) for p in resume.rglob("*") if p.is_file()) == [
        "a.json",
        "sub/b.bin",
    ]
    assert (resume / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
    assert storage.delete_tree(storage.join(root, "job1")) is True
    assert storage.list_files(ckpt) == []
    assert storage.delete_tree(storage.join(root, "job1")) is False


def test_small_files_round_trip(root: str) -> None:
    uri = storage.join(root, "job2", "shunter_result.json")
    assert not storage.exists(uri)
    storage.write_bytes(uri, b"{}")
    assert storage.exists(uri)
    assert storage.read_bytes(uri) == b"{}"
    with pytest.raises(ValueError, match="larger than"):
        storage.read_bytes(uri, max_bytes=1)


def test_missing_things_say_so(root: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(storage.join(root, "nope.json"))
    with pytest.raises(FileNotFoundError):
        storage.download_dir(storage.join(root, "nope"), tmp_path / "x")


def test_objects_land_in_the_bucket_under_the_prefix(s3: S3Server, s3_root: str) -> None:
    storage.write_bytes(storage.join(s3_root, "job3", "x.txt"), b"x")
    bucket = s3_root.removeprefix("s3://").split("/")[0]
    assert s3.keys(bucket) == ["shunter/job3/x.txt"]


def test_to_uri_round_trips(s3_root: str) -> None:
    fs, path = storage.resolve(storage.join(s3_root, "j"))
    assert storage.to_uri(fs, path) == storage.join(s3_root, "j")


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("s3://bucket/prefix", None),
        ("s3://bucket", None),
        ("/srv/shared", None),
        ("s3:///prefix", "needs a bucket"),
        ("gs://bucket/x", "not supported"),
        ("file:///srv/x", "not supported"),
        ("s3://bucket/a/../b", "no '..'"),
    ],
)
def test_storage_error(uri: str, problem: str | None) -> None:
    error = storage.storage_error(uri)
    assert (error is None) if problem is None else (error is not None and problem in error)
