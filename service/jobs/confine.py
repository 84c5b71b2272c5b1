"""Worker-reported locations must stay in the job's own output directory.

A driver holds an attempt token, so it can report any string as a checkpoint or final model
URI; resume and downloads then read from there. ``confined(uri, output_dir=..., field=...)``
returns the canonical path when ``uri`` (a path, or ``file://`` + path) resolves, after
symlinks, inside ``output_dir``; anything else is ``Unprocessable`` naming the field. Paths
need not exist on the API host (a node may write to shared storage later); ``realpath`` still
follows every symlink that does exist. With object storage (``output_dir`` an ``s3://`` URI)
the location must be a URI under that prefix, without ``..`` segments.
"""

from __future__ import annotations

import os

from service.errors import Unprocessable

__all__ = ["confined"]


def confined(uri: str, *, output_dir: str, field: str) -> str:
    if "://" in output_dir:  # object storage: a URI under the job's own prefix, no '..'
        return _confined_uri(uri, output_dir=output_dir, field=field)
    path = uri.removeprefix("file://")
    if "://" in path or not os.path.isabs(path):
        raise Unprocessable(
            f"{field}: {uri!r} must be an absolute path inside the job's output directory",
            detail="uri_outside_output_dir",
        )
    root = os.path.realpath(output_dir)
    real = os.path.realpath(path)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise Unprocessable(
            f"{field}: {uri!r} resolves outside the job's output directory",
            detail="uri_outside_output_dir",
        )
    return real


def _confined_uri(uri: str, *, output_dir: str, field: str) -> str:
    root = output_dir.rstrip("/")
    if not uri.startswith(root + "/") or ".." in uri.split("/") or "?" in uri or "#" in uri:
        raise Unprocessable(
            f"{field}: {uri!r} must be a URI inside the job's output directory {root}",
            detail="uri_outside_output_dir",
        )
    return uri.rstrip("/")
