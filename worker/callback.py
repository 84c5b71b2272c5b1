"""``ApiCallback``: a Ray Train ``UserCallback`` that registers committed checkpoints with the API.

It runs in the Ray Train controller actor (not in the driver, not in a worker), so it
carries only plain values and opens its own ``InternalApi`` lazily. A checkpoint is
registered after Ray has committed the report of every rank: its step (from rank 0's
metrics), its directory, size in bytes, rank 0's metrics, and whether its manifest verifies
(``trainer_core.manifest.verify_checkpoint``: every file's size and SHA-256; it imports no
torch, which this process otherwise never needs). An API error is logged, never raised: a
callback exception would fail the training run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ray.train import Checkpoint, UserCallback

from worker.api_client import ApiError, InternalApi

__all__ = ["ApiCallback", "dir_bytes"]

log = logging.getLogger(__name__)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class ApiCallback(UserCallback):
    def __init__(self, *, api_url: str, token: str, job_id: str, attempt: int) -> None:
        self._args = {"api_url": api_url, "token": token, "job_id": job_id, "attempt": attempt}
        self._api: InternalApi | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_args": self._args, "_api": None}  # httpx clients do not pickle

    def _client(self) -> InternalApi:
        if self._api is None:
            self._api = InternalApi(**self._args)  # type: ignore[arg-type]
        return self._api

    def after_report(
        self,
        run_context: Any,
        metrics: list[dict[str, Any]],
        checkpoint: Checkpoint | None,
    ) -> None:
        if checkpoint is None:
            return
        from trainer_core.manifest import verify_checkpoint

        path = Path(checkpoint.path)
        rank0 = dict(metrics[0]) if metrics else {}
        step = int(rank0.pop("step", 0))
        problem = verify_checkpoint(path)
        if problem is not None:
            log.warning("checkpoint %s does not verify: %s", path, problem)
        numeric = {k: float(v) for k, v in rank0.items() if isinstance(v, int | float)}
        try:
            self._client().checkpoint(
                step=step,
                uri=str(path),
                nbytes=dir_bytes(path),
                metrics=numeric,
                verified=problem is None,
            )
        except ApiError as e:
            log.warning("checkpoint %s not registered: %s", path, e)
