"""The runner's data plane as the training loop sees it (``SharedData``): a protocol, so the
config that carries one (``trainer_core.config``) and the data code that uses it
(``trainer_core.data``, ``trainer_core.streaming``) both name it without importing each other.
``worker.inputs.NodeInputs`` implements it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

__all__ = ["SharedData"]


class SharedData(Protocol):
    """The runner's data plane, when the cluster shares no disk (object storage:
    ``worker.inputs.NodeInputs``): inputs read through the node's cache, and tokenised datasets
    shared by every job through the store (``<storage>/.cache/tokenized/<key>/``)."""

    def content_id(self, path: str) -> str | None:
        """The content hash of the local input ``path`` when the runner knows it without
        reading the file (a stored object's manifest); ``None``: hash the bytes."""
        ...

    def materialize(self, path: str) -> None:
        """Make sure the input at ``path`` is on this node (fetched only when it must be
        read: a job whose tokenised data is in the store never fetches the raw file)."""
        ...

    def fetch_tokenized(self, key: str) -> Path | None:
        """The local directory of tokenised dataset ``key`` (``save_to_disk`` files),
        fetched through the node's cache, or ``None`` when the store does not hold it."""
        ...

    def claim_tokenized(self, key: str) -> AbstractContextManager[bool]:
        """Inside: ``True`` when this process alone builds ``key`` (the claim held until
        the block ends), ``False`` when another holds a live claim on it."""
        ...

    def publish_tokenized(self, key: str, directory: Path) -> Path:
        """Store the built dataset ``directory`` as ``key`` (files first, manifest last);
        returns its local directory in the node's cache (``directory`` is moved there)."""
        ...

    # Streaming datasets (``trainer_core.streaming``): larger than the node's cache.

    @property
    def cache_limit(self) -> int:
        """The node cache's byte cap."""
        ...

    def input_size(self, path: str) -> int | None:
        """Bytes of the stored input at ``path``, known without fetching it; ``None``: not
        a stored input."""
        ...

    def open_input(self, path: str) -> Iterator[Iterator[bytes]] | None:
        """The stored input at ``path`` streamed from the store (one byte stream per file,
        each block verified), never whole on this node; ``None``: read the local path."""
        ...

    def tokenized_index(self, key: str) -> dict[str, Any] | None:
        """The index of sharded dataset ``key`` once the store holds it whole, else ``None``."""
        ...

    def fetch_tokenized_file(self, key: str, name: str) -> Path:
        """The local path of file ``name`` of sharded dataset ``key``, through the node
        cache, pinned until ``release_tokenized_file``."""
        ...

    def release_tokenized_file(self, key: str, name: str) -> None:
        """Unpin that file: the cache may evict it."""
        ...

    def put_tokenized_file(self, key: str, path: Path) -> dict[str, Any]:
        """Upload one built file of sharded dataset ``key`` (alone in its folder) and delete
        it here; returns its manifest row ``{name: {size, sha256, ...}}``."""
        ...

    def finish_tokenized(self, key: str, files: dict[str, Any]) -> None:
        """Publish sharded dataset ``key``: its manifest (``files``), written last."""
        ...
