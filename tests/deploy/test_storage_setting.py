"""Storage is a (shared) filesystem path or an S3-compatible bucket: any other URI is refused at
start-up with a message that says what to use instead, rather than failing later on a worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings


@pytest.mark.parametrize("uri", ["gs://bucket/x", "file:///srv/x", "hdfs://nn/x"])
def test_other_schemes_are_refused(tmp_path: Path, uri: str) -> None:
    with pytest.raises(ValidationError, match="shared filesystem path or an S3-compatible bucket"):
        Settings(home=tmp_path, storage=uri)


def test_an_s3_uri_needs_a_bucket(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="needs a bucket"):
        Settings(home=tmp_path, storage="s3:///shunter")


@pytest.mark.parametrize("uri", ["s3://bucket/shunter", "s3://bucket/shunter/", "s3://bucket"])
def test_an_s3_bucket_is_accepted(tmp_path: Path, uri: str) -> None:
    assert Settings(home=tmp_path, storage=uri).storage == uri.rstrip("/")


def test_a_shared_path_is_taken_as_is(tmp_path: Path) -> None:
    assert Settings(home=tmp_path, storage=str(tmp_path / "nfs")).storage == str(tmp_path / "nfs")
