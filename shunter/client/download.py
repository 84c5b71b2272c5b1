"""Unpacking a model download (``GET /v1/jobs/{id}/checkpoints/{final|best}/download``).

The server streams an uncompressed tar; ``unpack_model`` reads it as a stream (nothing is
buffered whole) and extracts with tarfile's ``data`` filter, so a hostile archive cannot
write outside ``dest`` or create links and devices.

An unmerged PEFT adapter over a base that has no name (from scratch) comes with that base in
``base/`` (``trainer_core.export``); ``repoint_adapter`` aims the adapter's
``base_model_name_or_path`` at the unpacked copy, so ``AutoPeftModelFor*.from_pretrained``
loads the downloaded folder as is.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["repoint_adapter", "unpack_model"]

_BASE_DIR = "base"  # trainer_core.export.BASE_DIR (the client may not import trainer_core)


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


def repoint_adapter(folder: Path) -> None:
    """Point ``folder``'s ``adapter_config.json`` at ``folder/base`` when the base came along
    (absolute: PEFT reads the field as given, not relative to the adapter); else a no-op."""
    config_path, base = folder / "adapter_config.json", folder / _BASE_DIR
    if not (config_path.is_file() and (base / "config.json").is_file()):
        return
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = str(base.resolve())
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
