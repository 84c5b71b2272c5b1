"""Team datasets and base models in the store (``/v1/datasets``, ``/v1/models``): the typed
record and how a local file or folder becomes the upload's parts."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["StoredObject", "upload_parts"]


class StoredObject(BaseModel):
    """A dataset (``ds-...``) or base model (``mdl-...``) as the server checked and stored it."""

    model_config = ConfigDict(extra="allow")

    id: str
    kind: str
    name: str
    digest: str
    format: str
    columns: list[str] = Field(default_factory=list)
    rows: int | None = None
    sample: list[object] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)
    bytes: int = 0
    created_at: int = 0


def upload_parts(path: Path) -> list[tuple[str, tuple[str, IO[bytes]]]]:
    """The multipart ``file`` parts of a file or a folder (each named by its path inside the
    folder), opened for streaming; the caller closes them."""
    if path.is_file():
        files = [(path.name, path)]
    elif path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        files = [(p.relative_to(path).as_posix(), p) for p in found]
    else:
        raise FileNotFoundError(f"{path}: no such file or folder")
    if not files:
        raise FileNotFoundError(f"{path}: the folder holds no files")
    return [("file", (rel, open(p, "rb"))) for rel, p in files]
