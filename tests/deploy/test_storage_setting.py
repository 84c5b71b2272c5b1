"""Storage is a (shared) filesystem path: an object-store URI is refused at start-up with a
message that says what to use instead, rather than failing later on a worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings


@pytest.mark.parametrize("uri", ["s3://bucket/shunter", "gs://bucket/x", "file:///srv/x"])
def test_object_store_uri_is_refused(tmp_path: Path, uri: str) -> None:
    with pytest.raises(ValidationError, match="shared filesystem path"):
        Settings(home=tmp_path, storage=uri)


def test_a_shared_path_is_taken_as_is(tmp_path: Path) -> None:
    assert Settings(home=tmp_path, storage=str(tmp_path / "nfs")).storage == str(tmp_path / "nfs")
