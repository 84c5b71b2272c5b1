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
- The metrics spool (rank 0, a checkpoint on a shared filesystem): before flushing at a
  checkpoint, the points the API has not acknowledged are written to
  ``<output_dir>/metrics-spool.jsonl``; a successful flush deletes it. If the service (and
  with it the Ray head and this worker) dies during that flush, the checkpoint is on disk
  but its last points are not in the API, and the next attempt resumes after them: that
  attempt's rank 0 finds the spool and sends its points first (the API ignores any it already
  has). This is how a ``shunter serve`` SIGKILL mid-job once lost 3 of 40 loss points.
- Start-up phases (rank 0, ``worker.phases``): the first ``latest_checkpoint()`` call is
  ``model_built`` (trainer_core asks once model, data and engine are built, before resuming);
  the first ``report`` is ``first_step``.
- ``checkpoint_files(dir)``: a checkpoint ``worker.staging.localize`` made a node-local view
  of (object storage) is read through this node's cache, each rank fetching what it reads.
  So is one of this attempt's own checkpoints in staging that this node does not hold whole
  (a job on several nodes: each node's staging holds its own ranks' part): the load-best at
  the end and a divergence rollback read it from ``<storage_uri>/checkpoint-<step>``, where
  Ray Train put every node's part, through a view in ``<staging>/.bucket/``.
- ``stop_requested()``: rank 0's ``StopWatch`` (heartbeat polling) says whether the API asked
  this attempt to checkpoint now (preemption, pause); the loop broadcasts rank 0's answer.
- Ray itself is reached only through ``ray`` (``worker.ray_side``): in the Ray worker process,
  or relayed to it from a warm training process (``worker.warm``), which never imports Ray.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from trainer_core.fetch import CheckpointFiles
from worker.internal_api import MetricsSender, StopWatch, json_safe
from worker.phases import PhaseSender
from worker.ray_side import InProcessRay, RaySide

__all__ = ["RayReporter"]

_BUCKET_VIEWS = ".bucket"  # <staging>/.bucket/checkpoint-<step>: views of the bucket's copy

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
        spool: Path | None = None,
        phases: PhaseSender | None = None,
        ray: RaySide | None = None,
        storage_uri: str | None = None,
        staging: Path | None = None,
    ) -> None:
        self.rank = rank
        # Object storage: the run directory in the bucket and this node's staging dir.
        self._storage_uri, self._staging = storage_uri, staging
        self._ray: RaySide = ray if ray is not None else InProcessRay()
        self._phases = phases  # rank 0 only
        # Object storage: the checkpoint is in node-local staging and Ray Train uploads it.
        self._upload = upload
        self._local_rank = local_rank
        self._sender = sender  # rank 0 only
        self._stop_watch = stop_watch  # rank 0 only
        self._resume_from = resume_from
        self.total_steps = total_steps
        self.flush_timeout_s = 10.0  # the bounded wait for the API at each checkpoint
        self._spool = spool if sender is not None else None
        if self._spool is not None and self._spool.exists():
            self._replay_spool(self._spool)

    def _replay_spool(self, spool: Path) -> None:
        assert self._sender is not None
        points = []
        for line in spool.read_text().splitlines():
            try:
                points.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line: the rest was never acknowledged either way
        log.info("re-sending %d metric points an earlier attempt spooled", len(points))
        self._sender.put_points(points)
        if self._sender.flush(timeout_s=30.0):
            spool.unlink(missing_ok=True)

    def _write_spool(self, spool: Path) -> None:
        assert self._sender is not None
        points = self._sender.pending_points()
        tmp = spool.with_name(spool.name + ".tmp")
        with open(tmp, "w") as fh:
            for point in points:
                fh.write(json.dumps(json_safe(point), allow_nan=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, spool)  # atomic: a reader sees the old spool or the new one

    def report(
        self, step: int, metrics: dict[str, float], checkpoint_dir: Path | None = None
    ) -> None:
        if self._phases is not None:
            self._phases.mark("first_step")
        if self._sender is not None:
            epoch = metrics.get("epoch")
            progress: dict[str, Any] = {"step": step, "total_steps": self.total_steps}
            if epoch is not None:
                progress["epoch"] = epoch
            self._sender.put(step, metrics, progress)
            if self._sender.fenced.is_set():
                raise RuntimeError("attempt fenced by the API (409): stopping this run")
        if checkpoint_dir is not None:
            if self._spool is not None:
                self._write_spool(self._spool)
            if self._sender is not None and not self._sender.flush(self.flush_timeout_s):
                log.warning("metrics up to step %d not yet delivered (spooled); going on", step)
            elif self._spool is not None:
                self._spool.unlink(missing_ok=True)
            self._ray.report(
                {**metrics, "step": step},
                str(checkpoint_dir),
                upload=self._upload,
                local_rank=self._local_rank,
            )

    def latest_checkpoint(self) -> Path | None:
        if self._phases is not None:
            self._phases.mark("model_built")
        # On object storage Ray's checkpoint is in the bucket; train_fn has already put a
        # local copy of it in ``resume_from``.
        ckpt = None if self._upload else self._ray.checkpoint(as_uri=False)
        if ckpt is not None:
            return Path(ckpt)
        return Path(self._resume_from) if self._resume_from else None

    def stop_requested(self) -> str | None:
        return self._stop_watch.reason if self._stop_watch is not None else None

    def checkpoint_files(self, directory: Path) -> CheckpointFiles | None:
        # A checkpoint train_fn localized from the bucket (resume point, init_from) is read
        # through this node's cache; so is one of this attempt's own that this node holds
        # only part of. A whole one on local disk (one node, or a shared filesystem): None.
        from worker.staging import cached, localize

        view = cached(directory)
        if (
            view is not None
            or self._storage_uri is None
            or directory.parent != self._staging
            or _whole_here(directory)
        ):
            return view
        import storage

        uri = storage.join(self._storage_uri, directory.name)
        local = localize(uri, directory.parent / _BUCKET_VIEWS, local_rank=self._local_rank)
        return cached(local)

    def close(self) -> None:
        if self._phases is not None:
            self._phases.close()
        if self._stop_watch is not None:
            self._stop_watch.close()
        if self._sender is not None:
            self._sender.close()


def _whole_here(directory: Path) -> bool:
    """Whether this node holds every file ``directory``'s manifest lists (no manifest: no)."""
    from trainer_core.manifest import MANIFEST, parse_manifest

    try:
        table = parse_manifest((directory / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return False
    return all((directory / rel).is_file() for rel in table)
