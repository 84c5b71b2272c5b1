"""Job storage through ``pyarrow.fs``: a local (shared) path or an S3-compatible bucket.

``SHUNTER_STORAGE`` is either a filesystem path or ``s3://bucket[/prefix]``. Both the service
(listing, downloads, deletes) and the workers (checkpoints, results) go through here, so one
place knows how a storage URI becomes a ``(filesystem, path)`` pair. Ray Train persists
checkpoints with ``pyarrow.fs`` too, so the workers hand it the filesystem built here.

The S3 endpoint and credentials come from the standard AWS environment (``AWS_ENDPOINT_URL``
or ``SHUNTER_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``); the launcher passes them on to the Ray jobs (``STORAGE_ENV``). pyarrow is
imported lazily: the service's other modules never need it.

Faults of the object store (503 SlowDown, a reset connection, a stalled read) are retried at
two levels. The AWS SDK under pyarrow retries each request (``SHUNTER_S3_MAX_ATTEMPTS``, 10,
standard strategy: exponential backoff with jitter), which also covers Ray Train's checkpoint
uploads (one multipart part at a time). Above it every call here retries with backoff until
``SHUNTER_STORAGE_RETRY_S`` (120 s) has passed, and resumes rather than restarts: a streamed
read goes on with a range request from the byte it had reached, a directory copy skips the
files it already copied. A short answer counts as a fault, never as the end of a file. When
the bound passes, ``StorageUnavailable`` (an ``OSError``) says so: the worker reports it as
``storage_unavailable``, and the service requeues the attempt from its last verified
checkpoint. What is not a fault is raised at once: a missing key (``FileNotFoundError``),
denied access, a missing bucket.
"""

from __future__ import annotations

import functools
import os
import posixpath
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

__all__ = [
    "STORAGE_ENV",
    "RangeReader",
    "StorageUnavailable",
    "delete_tree",
    "download_dir",
    "exists",
    "is_remote",
    "is_transient",
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
    "SHUNTER_STORAGE_RETRY_S",
    "SHUNTER_S3_MAX_ATTEMPTS",
    "SHUNTER_S3_CONNECT_TIMEOUT_S",
)
_SCHEMES = ("s3",)
_CHUNK = 1024 * 1024
_REMOTE_CHUNK = 8 * 1024 * 1024  # one range request of a streamed remote read
_T = TypeVar("_T")
# Errors that no retry mends (the AWS SDK's names in pyarrow's messages).
_PERMANENT = (
    "ACCESS_DENIED",
    "AccessDenied",
    "NO_SUCH_BUCKET",
    "NoSuchBucket",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "INVALID_ACCESS_KEY_ID",
)
_NOT_FAULTS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


class StorageUnavailable(OSError):
    """The object store kept failing for longer than the bound (``SHUNTER_STORAGE_RETRY_S``):
    a lasting outage, not a missing object. ``worker.classify``: ``storage_unavailable``."""


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` from an object-store call is worth retrying: any ``OSError`` but a
    missing or forbidden object, a missing bucket, bad credentials, or an outage already
    judged lasting (``StorageUnavailable``)."""
    if not isinstance(exc, OSError) or isinstance(exc, (*_NOT_FAULTS, StorageUnavailable)):
        return False
    text = str(exc)
    return not any(mark in text for mark in _PERMANENT)


def retry_s() -> float:
    """How long one storage call keeps retrying faults before ``StorageUnavailable``."""
    return float(os.environ.get("SHUNTER_STORAGE_RETRY_S", "120"))


def _retrying(what: str, fn: Callable[[], _T], *, remote: bool = True) -> _T:
    """``fn()``, retried on transient faults with exponential backoff (0.1 s doubling to
    5 s, jittered) until ``retry_s()`` has passed; then ``StorageUnavailable``."""
    if not remote:
        return fn()
    bound = retry_s()
    deadline = time.monotonic() + bound
    delay, tries = 0.1, 0
    while True:
        try:
            return fn()
        except OSError as exc:
            tries += 1
            left = deadline - time.monotonic()
            if not is_transient(exc):
                raise
            if left <= 0:
                raise StorageUnavailable(
                    f"object storage unavailable: {what} failed {tries} times over "
                    f"{bound:g} s (SHUNTER_STORAGE_RETRY_S); last: {exc}"
                ) from None  # the last fault is in the message; a cause would be classified
            time.sleep(min(delay * (0.5 + random.random()), left))
            delay = min(delay * 2, 5.0)


def _remote(fs: FileSystem) -> bool:
    return getattr(fs, "type_name", "local") in _SCHEMES


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
    s3_class = _s3_class()

    endpoint = _endpoint()
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    if endpoint is None:
        return s3_class(region=region, **_s3_faults())
    url = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return s3_class(
        region=region or "us-east-1",
        scheme=url.scheme,
        endpoint_override=url.netloc,
        # Path-style addressing (http://host/bucket/key): what self-hosted S3 servers serve.
        force_virtual_addressing=False,
        **_s3_faults(),
    )


def _s3_faults() -> dict[str, Any]:
    """The SDK's own retries and connect timeout (a stalled read is cut by the SDK's low-speed
    limit; pyarrow ignores ``request_timeout`` on Linux)."""
    return {
        "max_attempts": int(os.environ.get("SHUNTER_S3_MAX_ATTEMPTS", "10")),
        "connect_timeout": float(os.environ.get("SHUNTER_S3_CONNECT_TIMEOUT_S", "5")),
    }


@functools.cache
def _s3_class() -> type[FileSystem]:
    """``S3FileSystem`` that keeps its retry strategy when pickled. pyarrow's own pickle drops
    it (pyarrow 26), so the filesystem Ray Train gets in ``RunConfig`` (and uploads checkpoints
    with) fell back to the SDK's 3 attempts; and ``copy_files`` ignores a part upload that
    failed past them (logged, not raised), so a checkpoint was stored without a file."""
    from pyarrow.fs import AwsStandardS3RetryStrategy, S3FileSystem

    class RetryingS3FileSystem(S3FileSystem):  # type: ignore[misc]
        def __init__(self, *, max_attempts: int, **kwargs: Any) -> None:
            retry = AwsStandardS3RetryStrategy(max_attempts=max_attempts)
            super().__init__(retry_strategy=retry, **kwargs)
            self.max_attempts = max_attempts

        def __reduce__(self) -> tuple[Any, ...]:
            kwargs = S3FileSystem.__reduce__(self)[1][0]
            return (_s3_rebuild, (self.max_attempts, kwargs))

    return RetryingS3FileSystem


def _s3_rebuild(max_attempts: int, kwargs: dict[str, Any]) -> FileSystem:
    return _s3_class()(max_attempts=max_attempts, **kwargs)


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
    infos = _retrying(
        f"listing {uri}",
        lambda: fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True)),
        remote=_remote(fs),
    )
    files = [
        (posixpath.relpath(i.path, base), int(i.size or 0))
        for i in infos
        if i.type == FileType.File
    ]
    return sorted(files)


def exists(uri: str) -> bool:
    from pyarrow.fs import FileType

    fs, path = resolve(uri)
    info = _retrying(f"checking {uri}", lambda: fs.get_file_info(path), remote=_remote(fs))
    return bool(info.type != FileType.NotFound)


def read_bytes(uri: str, *, max_bytes: int = 16 * 1024 * 1024) -> bytes:
    """A small file's bytes; ``FileNotFoundError`` when absent, ``ValueError`` when too big."""
    fs, path = resolve(uri)

    def _read() -> bytes:
        with fs.open_input_stream(path) as f:
            return bytes(f.read(max_bytes + 1))

    data = _retrying(f"reading {uri}", _read, remote=_remote(fs))
    if len(data) > max_bytes:
        raise ValueError(f"{uri} is larger than {max_bytes} bytes")
    return data


def open_read(uri: str) -> Iterator[bytes]:
    """A file's bytes in chunks (downloads stream from the bucket, never whole in memory). On
    object storage each chunk is one range request, retried from the byte it starts at, and
    the total is checked against the object's size: a broken stream resumes, or ends in
    ``StorageUnavailable``, never short."""
    fs, path = resolve(uri)
    if not _remote(fs):
        with fs.open_input_stream(path) as f:
            while chunk := f.read(_CHUNK):
                yield bytes(chunk)
        return
    with open_ranges(uri) as reader:
        offset = 0
        while offset < reader.size:
            chunk = reader.read_at(offset, _REMOTE_CHUNK)
            offset += len(chunk)
            yield chunk


class RangeReader:
    """A stored file open for random access (``open_ranges``)."""

    def __init__(self, handle: Any, *, name: str = "", remote: bool = False) -> None:
        self._handle = handle
        self._name, self._remote = name, remote
        self.size = int(handle.size())

    def read_at(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (one HTTP range request on S3); fewer only at the
        end of the file. A fault or a short answer is retried (``_retrying``)."""
        want = max(0, min(length, self.size - offset))

        def _read() -> bytes:
            data = bytes(self._handle.read_at(length, offset))
            if self._remote and len(data) != want:  # a cut answer is a fault, not the end
                raise OSError(f"short read of {self._name} at {offset}: {len(data)} of {want}")
            return data

        return _retrying(f"reading {self._name} at byte {offset}", _read, remote=self._remote)


@contextmanager
def open_ranges(uri: str) -> Iterator[RangeReader]:
    """A file opened for byte-range reads: a rank that needs a few slices of a large shard
    reads those, not the object. ``FileNotFoundError`` when absent."""
    fs, path = resolve(uri)
    remote = _remote(fs)
    handle = _retrying(f"opening {uri}", lambda: fs.open_input_file(path), remote=remote)
    with handle:
        yield RangeReader(handle, name=uri, remote=remote)


def write_bytes(uri: str, data: bytes) -> None:
    """Write a small file (parents created on a filesystem; an S3 put is atomic)."""
    fs, path = resolve(uri)
    _make_dir(fs, posixpath.dirname(path))

    def _put() -> None:
        with fs.open_output_stream(path) as f:
            f.write(data)

    _retrying(f"writing {uri}", _put, remote=_remote(fs))


def upload_dir(local: Path | str, uri: str) -> None:
    """Copy a local directory's files to ``uri`` (same relative layout). On object storage
    each file is retried on its own; the ones already copied are not sent again."""
    from pyarrow.fs import LocalFileSystem, copy_files

    fs, path = resolve(uri)
    _make_dir(fs, path)
    source = Path(local).resolve()
    if not _remote(fs):
        copy_files(
            str(source), path, source_filesystem=LocalFileSystem(), destination_filesystem=fs
        )
        return
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = file.relative_to(source).as_posix()
        _retrying(f"uploading {rel} to {uri}", _copier(file, fs, f"{path}/{rel}"))


def _copier(file: Path, fs: FileSystem, dest: str) -> Callable[[], None]:
    """One attempt at uploading ``file`` to ``dest``: streamed (a multipart upload on S3, whose
    close raises what a part met: pyarrow's ``copy_files`` can drop that error), then checked
    by its stored size."""
    size = file.stat().st_size

    def _copy() -> None:
        with open(file, "rb") as src, fs.open_output_stream(dest) as out:
            while chunk := src.read(_REMOTE_CHUNK):
                out.write(chunk)
        stored = fs.get_file_info(dest).size
        if stored != size:
            raise OSError(f"uploaded {dest}: {stored} bytes stored of {size}")

    return _copy


def download_dir(uri: str, local: Path | str, *, skip: tuple[str, ...] = ()) -> Path:
    """Copy every file under ``uri`` into the local directory ``local``; returns it. Files
    whose first path component is in ``skip`` are left out (a checkpoint's model cache,
    ``CHECKPOINT_MODEL_FILES``, is no resume input). ``FileNotFoundError`` when there is
    nothing under ``uri``. From object storage each file streams through ``open_read``
    (resumed at the byte a fault stopped it) and must come to its listed size."""
    from pyarrow.fs import LocalFileSystem, copy_files

    files = list_files(uri)
    if not files:
        raise FileNotFoundError(f"nothing stored under {uri}")
    fs, path = resolve(uri)
    target = Path(local)
    target.mkdir(parents=True, exist_ok=True)
    if not _remote(fs) and not any(rel.split("/", 1)[0] in skip for rel, _ in files):
        copy_files(
            path,
            str(target.resolve()),
            source_filesystem=fs,
            destination_filesystem=LocalFileSystem(),
        )
        return target
    for rel, size in files:
        if rel.split("/", 1)[0] in skip:
            continue
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        got = 0
        with open(dest, "wb") as out:
            for chunk in open_read(join(uri, rel)):
                got += len(chunk)
                out.write(chunk)
        if got != size:  # the object changed under us: never leave a short copy
            dest.unlink()
            raise OSError(f"{uri}/{rel}: read {got} bytes, listed {size}")
    return target


def delete_tree(uri: str) -> bool:
    """Remove ``uri`` and everything under it; False when there was nothing."""
    from pyarrow.fs import FileType

    fs, path = resolve(uri)
    remote = _remote(fs)
    kind = _retrying(f"checking {uri}", lambda: fs.get_file_info(path), remote=remote).type
    if kind == FileType.NotFound:
        if not list_files(uri):  # S3 has no directories: a prefix may still hold objects
            return False
        kind = FileType.Directory
    if kind == FileType.Directory:
        _retrying(f"deleting {uri}", lambda: fs.delete_dir(path), remote=remote)
    else:
        _retrying(f"deleting {uri}", lambda: fs.delete_file(path), remote=remote)
    return True
