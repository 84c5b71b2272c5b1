"""``ApiCallback``: a Ray Train ``UserCallback`` that registers committed checkpoints with the API.

It runs in the Ray Train controller actor (not in the driver, not in a worker), so it
carries only plain values and opens its own ``InternalApi`` lazily. A checkpoint is
registered after Ray has committed the report of every rank: its step (from rank 0's
metrics), its directory (an ``s3://`` URI on object storage, verified by reading the stored
objects: ``verify_stored``), size in bytes, rank 0's metrics, and whether its manifest verifies
(``trainer_core.manifest.verify_checkpoint``: every file's size and SHA-256; it imports no
torch, which this process otherwise never needs). The registration is queued in a
``worker.outbox.PostOutbox`` (on disk, bounded, in order) and sent from its thread, so an API
that is away (its database restarting, this node cut off from it) neither loses it nor
stalls training: it lands when the API answers (the service keeps one row per step, so a
repeat is harmless). Nothing is raised from here: a callback exception would fail the
training run.

``OutboxFlush`` waits, when training ends (``after_controller_finish``), until the attempt's
outbox has delivered everything (bounded), before ``fit()`` returns: the driver's final
status must never overtake a registration, which the API would then refuse (409: the
attempt is over) and lose. It is its own controller callback because Ray Train hands a
``UserCallback`` (``ApiCallback``) only the report and exception hooks, never the
controller's: a flush in ``ApiCallback.after_controller_finish`` never ran, and a job whose
API came back near its end finished with its last checkpoints unregistered.

``RestartWatch`` turns Ray Train's own restarts of the worker group (``FailureConfig``: a worker
died, e.g. SIGKILL or a lost node) into API events: the lost worker's rank and node, the cause,
the restart's number in the attempt (the service writes one event per number, so a re-sent
report is harmless; it goes through the same outbox as the registrations), and the step the
new group resumes from (the newest checkpoint Ray committed in this run, else
the attempt's ``resume_from``). It uses Ray Train's internal callback interfaces
(``ReportCallback`` + ``WorkerGroupCallback``, as Ray's own ``CheckpointManager`` does): the
public ``UserCallback`` sees neither worker-group starts nor the workers' nodes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import threading
from pathlib import Path
from typing import Any

from ray.train import Checkpoint, UserCallback
from ray.train.v2._internal.execution.callback import (
    ControllerCallback,
    ReportCallback,
    WorkerGroupCallback,
)

import storage
from worker.internal_api import InternalApi, restart_body
from worker.outbox import PostOutbox

__all__ = ["ApiCallback", "OutboxFlush", "RestartWatch", "dir_bytes", "verify_stored"]

log = logging.getLogger(__name__)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# How long the end of training waits for registrations still queued (the API away).
FINISH_FLUSH_S = 300.0


def outbox_path(job_id: str, attempt: int) -> Path:
    """This attempt's checkpoint outbox on the controller's node."""
    return Path(tempfile.gettempdir()) / "shunter-outbox" / f"{job_id}-{attempt}.jsonl"


_OUTBOXES: dict[Path, PostOutbox] = {}
_OUTBOXES_LOCK = threading.Lock()


def attempt_outbox(args: dict[str, Any], path: Path) -> PostOutbox:
    """The attempt's one outbox in this process (the Train controller): checkpoint
    registrations and restart reports share it, so they land in the order they were made
    and the flush at the end of training covers both."""
    with _OUTBOXES_LOCK:
        box = _OUTBOXES.get(path)
        if box is None:
            box = _OUTBOXES[path] = PostOutbox(InternalApi(**args), path=path)
        return box


class ApiCallback(UserCallback):
    def __init__(self, *, api_url: str, token: str, job_id: str, attempt: int) -> None:
        self._args = {"api_url": api_url, "token": token, "job_id": job_id, "attempt": attempt}
        self._path = outbox_path(job_id, attempt)
        self._outbox: PostOutbox | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Threads and httpx clients do not pickle: the controller opens its own.
        return {"_args": self._args, "_path": self._path, "_outbox": None}

    def _queue(self) -> PostOutbox:
        if self._outbox is None:
            self._outbox = attempt_outbox(self._args, self._path)
        return self._outbox

    def after_report(
        self,
        run_context: Any,
        metrics: list[dict[str, Any]],
        checkpoint: Checkpoint | None,
    ) -> None:
        if checkpoint is None:
            return
        from trainer_core.manifest import verify_checkpoint

        uri = storage.to_uri(checkpoint.filesystem, checkpoint.path)
        rank0 = dict(metrics[0]) if metrics else {}
        step = int(rank0.pop("step", 0))
        if storage.is_remote(uri):  # object storage: read the stored copy through the bucket
            problem, nbytes = verify_stored(uri), sum(n for _, n in storage.list_files(uri))
        else:
            problem, nbytes = verify_checkpoint(Path(uri)), dir_bytes(Path(uri))
        if problem is not None:
            log.warning("checkpoint %s does not verify: %s", uri, problem)
        numeric = {k: float(v) for k, v in rank0.items() if isinstance(v, int | float)}
        body = {
            "step": step,
            "uri": uri,
            "bytes": nbytes,
            "metrics": numeric,
            "verified": problem is None,
        }
        if not self._queue().put("checkpoints", body):
            log.warning("checkpoint %s not registered: the outbox is full", uri)


class OutboxFlush(ControllerCallback):
    """At the end of training, the attempt's queued posts (checkpoints, restarts) land first."""

    def __init__(self, *, job_id: str, attempt: int, timeout_s: float = FINISH_FLUSH_S) -> None:
        self._path = outbox_path(job_id, attempt)
        self._timeout_s = timeout_s

    def after_controller_finish(self, result: Any) -> None:
        with _OUTBOXES_LOCK:
            box = _OUTBOXES.get(self._path)  # none: nothing was ever queued in this process
        if box is not None and not box.flush(self._timeout_s):
            log.warning(
                "%d checkpoint registrations not delivered in %.0f s (kept in %s)",
                box.pending(),
                self._timeout_s,
                self._path,
            )


def verify_stored(uri: str) -> str | None:
    """``verify_checkpoint`` for a checkpoint in object storage: every file in its manifest is
    stored with that size and SHA-256 (streamed, never downloaded whole)."""
    from trainer_core.manifest import MANIFEST

    try:
        files = json.loads(storage.read_bytes(storage.join(uri, MANIFEST)))["files"]
    except FileNotFoundError:
        return "no manifest.json (incomplete write)"
    except (OSError, ValueError, KeyError) as exc:
        return f"unreadable manifest: {exc}"
    stored = dict(storage.list_files(uri))
    for rel, meta in files.items():
        if rel not in stored:
            return f"{rel} is missing"
        if stored[rel] != meta["size"]:
            return f"{rel} has {stored[rel]} bytes, manifest says {meta['size']}"
        digest = hashlib.sha256()
        for chunk in storage.open_read(storage.join(uri, rel)):
            digest.update(chunk)
        if digest.hexdigest() != meta["sha256"]:
            return f"{rel} does not match its SHA-256"
    return None


def _lost_rank(errors: dict[int, str]) -> int | None:
    """The rank that died: a dead actor's error wins over the survivors' collateral errors."""
    dead = [r for r, e in errors.items() if "ActorDied" in e or "RayActorError" in e]
    return min(dead or errors) if errors else None


class RestartWatch(ReportCallback, WorkerGroupCallback):
    """Reports each worker-group restart inside this attempt (runs in the Train controller)."""

    def __init__(
        self, *, api_url: str, token: str, job_id: str, attempt: int, resume_from: str | None
    ) -> None:
        self._args = {"api_url": api_url, "token": token, "job_id": job_id, "attempt": attempt}
        self._path = outbox_path(job_id, attempt)
        self._outbox: PostOutbox | None = None
        self._step = storage.checkpoint_step(resume_from)  # where a new group would resume
        self._groups = 0
        self._nodes: dict[int, str] = {}  # world rank -> node IP of the current group
        self._errors: dict[int, str] = {}  # world rank -> "Type: message" seen by polls

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_outbox": None}

    def after_report(self, training_report: Any, metrics: list[dict[str, Any]]) -> None:
        if getattr(training_report, "checkpoint", None) is not None and metrics:
            self._step = int(metrics[0].get("step", self._step))

    def after_worker_group_poll_status(self, worker_group_status: Any) -> None:
        for rank, error in worker_group_status.errors.items():
            self._errors.setdefault(int(rank), f"{type(error).__name__}: {error}")

    def after_worker_group_start(self, worker_group: Any) -> None:
        self._groups += 1
        if self._groups > 1:
            self._report_restart()
        self._errors = {}
        self._nodes = {
            int(w.distributed_context.world_rank): str(w.metadata.node_ip)
            for w in worker_group.get_workers()
        }

    def _report_restart(self) -> None:
        rank = _lost_rank(self._errors)
        cause = self._errors.get(rank, "") if rank is not None else ""
        cause = cause.strip().splitlines()[0] if cause.strip() else "the worker group failed"
        body = restart_body(
            rank=rank,
            node=self._nodes.get(rank) if rank is not None else None,
            cause=cause,
            resumed_from_step=self._step,
            seq=self._groups - 1,
        )
        if self._outbox is None:
            self._outbox = attempt_outbox(self._args, self._path)
        if not self._outbox.put("restarts", body):
            log.warning("worker-group restart not reported: the outbox is full")
