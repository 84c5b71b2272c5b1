"""``RayReporter``: trainer_core's ``Reporter`` inside a Ray Train worker.

- Per-step metrics go through a non-blocking side channel: rank 0 owns a ``MetricsSender``
  (background thread batching to ``POST metrics``). ``ray.train.report`` is NOT called for
  them: in Ray Train v2 it blocks until the controller's next poll (DESIGN.md, measured
  ~2 s per call at the default interval), which would cap training at one step per poll.
  Before a checkpoint is reported, rank 0 flushes the sender (bounded wait), so a
  registered checkpoint never runs ahead of the metrics it covers.
- A published checkpoint goes through ``ray.train.report(metrics, checkpoint=...)`` on every
  rank (trainer_core calls ``report`` with the same ``checkpoint_dir`` on every rank, the same
  number of times). The checkpoint is already written inside the Ray Train run directory
  (the job's ``output_dir``), so it is registered in place (``NO_UPLOAD``), not copied. The
  driver's ``ApiCallback`` forwards it to the API once Ray has committed it. On object storage
  (``upload``) the checkpoint is in node-local staging: each node's local rank 0 has Ray Train
  upload it (``SYNC``) to ``<run dir>/checkpoint-<step>`` in the bucket.
- ``latest_checkpoint()``: Ray's newest committed checkpoint of this run (after a worker-group
  restart), else the attempt's ``resume_from`` (the newest verified checkpoint of an earlier
  attempt, handed over by the API), else None.
- ``stop_requested()``: rank 0's ``StopWatch`` (heartbeat polling) says whether the API asked
  this attempt to checkpoint now (preemption, pause); the loop broadcasts rank 0's answer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from worker.internal_api import MetricsSender, StopWatch

__all__ = ["RayReporter"]

log = logging.getLogger(__name__)


class RayReporter:
    def __init__(
        self,
        *,
        rank: int,
        sender: MetricsSender | None,
        resume_from: str | None,
        total_steps: int | None = None,
        stop_watch: StopWatch | None = None,
        upload: bool = False,
        local_rank: int = 0,
    ) -> None:
        self.rank = rank
        # Object storage: the checkpoint is in node-local staging and Ray Train uploads it.
        self._upload = upload
        self._local_rank = local_rank
        self._sender = sender  # rank 0 only
        self._stop_watch = stop_watch  # rank 0 only
        self._resume_from = resume_from
        self.total_steps = total_steps

    def report(
        self, step: int, metrics: dict[str, float], checkpoint_dir: Path | None = None
    ) -> None:
        if self._sender is not None:
            epoch = metrics.get("epoch")
            progress: dict[str, Any] = {"step": step, "total_steps": self.total_steps}
            if epoch is not None:
                progress["epoch"] = epoch
            self._sender.put(step, metrics, progress)
            if self._sender.fenced.is_set():
                raise RuntimeError("attempt fenced by the API (409): stopping this run")
        if checkpoint_dir is not None:
            if self._sender is not None and not self._sender.flush(timeout_s=10.0):
                log.warning("metrics up to step %d not yet delivered; going on", step)
            import ray.train
            from ray.train import CheckpointUploadMode

            if not self._upload:
                ray.train.report(
                    {**metrics, "step": step},
                    checkpoint=ray.train.Checkpoint.from_directory(str(checkpoint_dir)),
                    checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD,
                )
                return
            # One upload per node (its ranks share the staging dir); Ray merges the nodes'
            # files into <run dir>/checkpoint-<step>. The local copy stays: trainer_core
            # prunes it and may load it as the best checkpoint at the end.
            mine = self._local_rank == 0
            ray.train.report(
                {**metrics, "step": step},
                checkpoint=ray.train.Checkpoint.from_directory(str(checkpoint_dir))
                if mine
                else None,
                checkpoint_dir_name=checkpoint_dir.name,
                checkpoint_upload_mode=CheckpointUploadMode.SYNC,
                delete_local_checkpoint_after_upload=False,
            )

    def latest_checkpoint(self) -> Path | None:
        import ray.train

        # On object storage Ray's checkpoint is in the bucket; train_fn has already put a
        # local copy of it in ``resume_from``.
        ckpt = None if self._upload else ray.train.get_checkpoint()
        if ckpt is not None:
            return Path(ckpt.path)
        return Path(self._resume_from) if self._resume_from else None

    def stop_requested(self) -> str | None:
        return self._stop_watch.reason if self._stop_watch is not None else None

    def close(self) -> None:
        if self._stop_watch is not None:
            self._stop_watch.close()
        if self._sender is not None:
            self._sender.close()
