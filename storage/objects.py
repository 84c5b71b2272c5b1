"""Job storage through ``pyarrow.fs``: a local (shared) path or an S3-compatible bucket.

``SHUNTER_STORAGE`` is either a filesystem path or ``s3://bucket[/prefix]``. Both the service
(listing, downloads, deletes) and the workers (checkpoints, results) go through here, so one
place knows how a storage URI becomes a ``(filesystem, path)`` pair. Ray Train persists
checkpoints with ``pyarrow.fs`` too, so the workers hand it the filesystem built here.

The S3 endpoint and credentials come from the standard AWS environment (``AWS_ENDPOINT_URL``
or ``SHUNTER_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``); the launcher passes them on to the Ray jobs (``STORAGE_ENV``). pyarrow is
imported lazily: the service's other modules never need it.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

__all__ = [
    "STORAGE_ENV",
    "RangeReader",
    "delete_tree",
    "download_dir",
    "exists",
    "is_remote",
    "join",
    "list_files",
    "open_ranges",
    "open_read",
    "read_bytes",
    "resolve",
    "storage_error",
    "to_uri",
    "upload_dir",
    "write_bytes",
]

# What a process needs to reach the object store; the launcher copies these to Ray jobs.
STORAGE_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "SHUNTER_S3_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)
_SCHEMES = ("s3",)
_CHUNK = 1024 * 1024


def is_remote(uri: str) -> bool:
    """True for an object-store URI (``scheme://...``), False for a filesystem path."""
    return "://" in uri


def storage_error(uri: str) -> str | None:
    """Why ``uri`` cannot be job storage (None when it can): a path, or ``s3://bucket/...``."""
    if not is_remote(uri):
        return None
    parts = urlsplit(uri)
    if parts.scheme not in _SCHEMES:
        return (
            f"{uri!r}: the {parts.scheme!r} scheme is not supported; use a shared filesystem path"
            " or an S3-compatible bucket, s3://bucket/prefix"
        )
    if not parts.netloc:
        return f"{uri!r}: an S3 storage URI needs a bucket, s3://bucket/prefix"
    if parts.query or parts.fragment or ".." in parts.path.split("/"):
        return f"{uri!r}: use a plain s3://bucket/prefix (no '..', query or fragment)"
    return None


def join(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended by '/' (a path stays a path)."""
    if not is_remote(uri):
        return str(Path(uri, *parts))
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])


def _endpoint() -> str | None:
    for name in ("SHUNTER_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(name):
            return os.environ[name]
    return None


def _s3() -> FileSystem:
    from pyarrow.fs import S3FileSystem

    endpoint = _endpoint()
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    if endpoint is None:
        return S3FileSystem(region=region)
    url = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return S3FileSystem(
        region=region or "us-east-1",
        scheme=url.scheme,
        endpoint_override=url.netloc,
        # Path-style addressing (http://host/bucket/key): what self-hosted S3 servers serve.
        force_virtual_addressing=False,
    )


def resolve(uri: str) -> tuple[FileSystem, str]:
    """``(filesystem, path)`` for a storage URI or a local path; raises ``ValueError`` for
    an unsupported one. The path has no scheme (``bucket/prefix/...`` for S3)."""
    from pyarrow.fs import LocalFileSystem

    if not is_remote(uri):
        return LocalFileSystem(), os.path.abspath(os.path.expanduser(uri))
    problem = storage_error(uri)
    if problem is not None:
        raise ValueError(problem)
    parts = urlsplit(uri)
    return _s3(), posixpath.normpath(f"{parts.netloc}/{parts.path.lstrip('/')}").rstrip("/")


def to_uri(fs: FileSystem, path: str) -> str:
    """The URI of ``path`` on ``fs``: ``s3://...`` on S3, else the path as it is (Ray Train
    may hand over a wrapped local filesystem)."""
    kind = getattr(fs, "type_name", "local")
    return f"{kind}://{path}" if kind in _SCHEMES else path


def _make_dir(fs: FileSystem, path: str) -> None:
    # Only a filesystem has directories; on S3 they would be empty marker objects.
    if fs.type_name == "local":
        fs.create_dir(path, recursive=True)


def list_files(uri: str) -> list[tuple[str, int]]:
    """Every file under ``uri``, as (path relative to it, size), sorted; [] when none."""
    from pyarrow.fs import FileSelector, FileType

    fs, base = resolve(uri)
    infos = fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True))
    files = [
        (posixpath.relpath(i.path, base), int(i.size or 0))
        for i in infos
        if i.type == FileType.File
    ]
    return sorted(files)


def exists(uri: str) -> bool:
    from pyarrow.fs import FileType

    fs, path = resolve(uri)
    return bool(fs.get_file_info(path).type != FileType.NotFound)


def read_bytes(uri: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
    """A small file's bytes; ``FileNotFoundError`` when absent, ``ValueError`` when too big."""
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        data = bytes(f.read(max_bytes + 1))
    if len(data) > max_bytes:
        raise ValueError(f"{uri} is larger than {max_bytes} bytes")
    return data


def open_read(uri: str) -> Iterator[bytes]:
    """A file's bytes in chunks (downloads stream from the bucket, never whole in memory)."""
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        while chunk := f.read(_CHUNK):
            yield bytes(chunk)


class RangeReader:
    """A stored file open for random access (``open_ranges``)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.size = int(handle.size())

    def read_at(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (one HTTP range request on S3); fewer at the end."""
        return bytes(self._handle.read_at(length, offset))


@contextmanager
def open_ranges(uri: str) -> Iterator[RangeReader]:
    """A file opened for byte-range reads: a rank that needs a few slices of a large shard
    reads those, not the object. ``FileNotFoundError`` when absent."""
    fs, path = resolve(uri)
    with fs.open_input_file(path) as handle:
        yield RangeReader(handle)


def write_bytes(uri: str, data: bytes) -> None:
    """Write a small file (parents created on a filesystem; an S3 put is atomic)."""
    fs, path = resolve(uri)
    _make_dir(fs, posixpath.dirname(path))
    with fs.open_output_stream(path) as f:
        f.write(data)


def upload_dir(local: Path | str, uri: str) -> None:
    """Copy a local directory's files to ``uri`` (same relative layout)."""
    from pyarrow.fs import LocalFileSystem, copy_files

    fs, path = resolve(uri)
    _make_dir(fs, path)
    copy_files(
        str(Path(local).resolve()),
        path,
        source_filesystem=LocalFileSystem(),
        destination_filesystem=fs,
    )


def download_dir(uri: str, local: Path | str, *, skip: tuple[str, ...] = ()) -> Path:
    """Copy every file under ``uri`` into the local directory ``local``; returns it. Files
    whose first path component is in ``skip`` are left out (a checkpoint's model cache,
    ``CHECKPOINT_MODEL_FILES``, is no resume input). ``FileNotFoundError`` when there is
    nothing under ``uri``."""
    from pyarrow.fs import LocalFileSystem, copy_files

    files = list_files(uri)
    if not files:
        raise FileNotFoundError(f"nothing stored under {uri}")
    fs, path = resolve(uri)
    target = Path(local)
    target.mkdir(parents=True, exist_ok=True)
    if not any(rel.split("/", 1)[0] in skip for rel, _ in files):
        copy_files(
            path,
            str(target.resolve()),
            source_filesystem=fs,
            destination_filesystem=LocalFileSystem(),
        )
        return target
    for rel, _ in files:
        if rel.split("/", 1)[0] in skip:
            continue
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") as out:
            for chunk in open_read(join(uri, rel)):
                out.write(chunk)
    return target


def delete_tree(uri: str) -> bool:
    """Remove ``uri`` and everything under it; False when there was nothing."""
    from pyarrow.fs import FileType

    fs, path = resolve(uri)
    kind = fs.get_file_info(path).type
    if kind == FileType.NotFound:
        if not list_files(uri):  # S3 has no directories: a prefix may still hold objects
            return False
        kind = FileType.Directory
    if kind == FileType.Directory:
        fs.delete_dir(path)
    else:
        fs.delete_file(path)
    return True
