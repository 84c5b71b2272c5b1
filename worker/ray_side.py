"""What the training body needs from Ray Train, in one place: the worker's context (read
once, in the Ray worker process) and the two calls that must happen in that process
(``ray.train.report`` and ``ray.train.get_checkpoint``).

``InProcessRay`` makes the calls itself (the training body runs in the Ray worker, or it
answers for a warm child); ``RelayedRay`` is the warm child's stand-in, which asks the Ray
worker over the channel (``worker.warm.call``), so the child never imports Ray.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["InProcessRay", "RaySide", "RelayedRay", "WorkerContext", "worker_context"]


@dataclass(frozen=True, kw_only=True)
class WorkerContext:
    rank: int
    local_rank: int
    node_id: str
    node_ip: str


def worker_context() -> WorkerContext:
    """This Ray Train worker's context (call in the Ray worker process)."""
    import ray
    import ray.train

    ctx = ray.train.get_context()
    return WorkerContext(
        rank=ctx.get_world_rank(),
        local_rank=ctx.get_local_rank(),
        node_id=ray.get_runtime_context().get_node_id(),
        node_ip=ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
    )


class RaySide(ABC):
    """The two calls, with their one signature; a side says only how a call is made
    (``_do``: by name, with the arguments in order)."""

    def report(
        self,
        metrics: dict[str, Any],
        checkpoint_dir: str | None = None,
        *,
        upload: bool = False,
        local_rank: int = 0,
    ) -> None:
        """``ray.train.report``; with ``checkpoint_dir``, registered in place (``upload``
        False) or uploaded by each node's local rank 0 (object storage)."""
        self._do("report", metrics, checkpoint_dir, upload, local_rank)

    def checkpoint(self, *, as_uri: bool) -> str | None:
        """Ray's newest checkpoint of this run: its local path, or its URI (``as_uri``)."""
        got = self._do("checkpoint", as_uri)
        return str(got) if got is not None else None

    @abstractmethod
    def _do(self, name: str, *args: Any) -> Any:
        """Make the call ``name`` (``report`` or ``checkpoint``) with ``args``."""


class InProcessRay(RaySide):
    """The calls, made in this (the Ray worker) process."""

    def _do(self, name: str, *args: Any) -> Any:
        if name == "report":
            return self._report(*args)
        if name == "checkpoint":
            return self._checkpoint(*args)
        raise ValueError(f"no such Ray call: {name!r}")

    def _report(
        self, metrics: dict[str, Any], checkpoint_dir: str | None, upload: bool, local_rank: int
    ) -> None:
        import ray.train
        from ray.train import CheckpointUploadMode

        if checkpoint_dir is None:
            ray.train.report(metrics)
            return
        ckpt = ray.train.Checkpoint.from_directory(checkpoint_dir)
        if not upload:
            ray.train.report(
                metrics, checkpoint=ckpt, checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD
            )
            return
        # One upload per node (its ranks share the staging dir; rank 0's manifest names every
        # node's files); Ray merges the nodes' parts into <run dir>/checkpoint-<step>. The
        # local copy stays: trainer_core prunes it and may load it as the best at the end.
        ray.train.report(
            metrics,
            checkpoint=ckpt if local_rank == 0 else None,
            checkpoint_dir_name=Path(checkpoint_dir).name,
            checkpoint_upload_mode=CheckpointUploadMode.SYNC,
            delete_local_checkpoint_after_upload=False,
        )

    def _checkpoint(self, as_uri: bool) -> str | None:
        import ray.train

        ckpt = ray.train.get_checkpoint()
        if ckpt is None:
            return None
        if not as_uri:
            return str(ckpt.path)
        import storage

        return storage.to_uri(ckpt.filesystem, ckpt.path)

    def answer(self, request: tuple[str, tuple[Any, ...]]) -> Any:
        """A ``RelayedRay`` call, made here (``worker.warm.serve``'s handler)."""
        name, args = request
        return self._do(name, *args)


class RelayedRay(RaySide):
    """The calls, asked of the Ray worker that spawned this warm child."""

    def __init__(self, channel: socket.socket) -> None:
        self._channel = channel

    def _do(self, name: str, *args: Any) -> Any:
        from worker.warm import call

        return call(self._channel, (name, args))
