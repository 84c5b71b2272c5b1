"""Unpacking a model download (``GET /v1/jobs/{id}/checkpoints/{final|best}/download``).

The server streams an uncompressed tar; ``unpack_model`` reads it as a stream (nothing is
buffered whole) and extracts with tarfile's ``data`` filter, so a hostile archive cannot
write outside ``dest`` or create links and devices.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["unpack_model"]


class _IterReader:
    """A read()-able file over an iterator of byte chunks (what tarfile's stream mode needs)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buf) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
        if size < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:size], self._buf[size:]
        return out


def unpack_model(chunks: Iterator[bytes], dest: Path) -> list[str]:
    """Extract the tar stream under ``dest``; returns the top-level folder names."""
    dest.mkdir(parents=True, exist_ok=True)
    tops: set[str] = set()
    with tarfile.open(fileobj=_IterReader(chunks), mode="r|") as tar:  # type: ignore[call-overload]
        for member in tar:
            tops.add(member.name.split("/", 1)[0])
            tar.extract(member, dest, filter="data")
    return sorted(tops)
