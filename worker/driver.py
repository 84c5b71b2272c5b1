"""``python -m worker.driver``: one attempt of one job, as a Ray job's entrypoint.

Reads its identity from the environment the launcher set (``SHUNTER_API_URL``,
``SHUNTER_ATTEMPT_TOKEN``, ``SHUNTER_JOB_ID``, ``SHUNTER_ATTEMPT``), then:

1. fetches the resolved spec (``GET .../spec``: spec, output_dir, resume_from);
2. reports ``running`` and starts the heartbeat thread (lease renewal; a ``cancel_requested``
   answer, a 409 fence or ``max_runtime_seconds`` ends this process, which ends its Ray job
   and, through Ray's ownership, the Train controller and workers);
3. checks what can be checked cheaply before any worker starts (local dataset paths exist,
   stored objects' manifests match their digests), so a bad path fails at once as
   ``user_error`` (a corrupt object as ``data_corrupt``) instead of after ``max_restarts``
   retries;
4. runs the Ray Train trainer's ``fit()`` (``TorchTrainer``'s data-parallel trainer with a
   torch-free backend, ``worker.ray_trainer``): ``ScalingConfig`` from ``resources``,
   ``RunConfig(name=<job id's output dir name>, storage_path=<its parent>)`` so the
   checkpoints trainer_core writes in ``output_dir`` are inside Ray Train's run directory,
   ``FailureConfig(max_restarts)``; on object storage (``output_dir`` an ``s3://`` URI) the run
   directory is the job's prefix in the bucket, the workers train into node-local staging and
   Ray Train uploads each checkpoint (``worker.staging``),
   ``CheckpointConfig(num_to_keep=None)`` (trainer_core prunes to ``save_total_limit``, see
   ``build_trainer``), the ``ApiCallback``;
5. reports ``succeeded`` with ``final_model_uri``, or ``failed`` with ``error`` from
   ``worker.classify.classify``, or ``preempted`` at a step when the workers checkpointed and
   stopped on a checkpoint-now request (preemption, pause: rank 0 hears it in its own heartbeat
   replies, ``worker.internal_api.StopWatch``). Exit status: 0 on success or preemption, 1 on
   failure, 3 when fenced/cancelled.

``max_runtime_seconds`` bounds the whole job's run time: the spec reply says how long earlier
attempts ran (``runtime_used_s``) and this attempt gets the rest.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import storage
from shunter.jobspec import JobSpec
from shunter.provenance import installed_versions
from shunter.wire import ONLY_NODES_ENV, RAY_GCS_ADDRESS_ENV, attempt_identity
from worker import startup_trace
from worker.classify import ErrorInfo, classify
from worker.internal_api import ApiError, AttemptFenced, InternalApi, RetryPolicy
from worker.log_shipper import LogShipper, flush_installed

__all__ = [
    "Heartbeat",
    "avoid_nodes_selector",
    "build_trainer",
    "main",
    "only_nodes_selector",
    "preflight",
    "preflight_inputs",
    "warm_main",
]

log = logging.getLogger("worker.driver")

EXIT_FENCED = 3


class Heartbeat:
    """Renews the lease every ``interval_s``; calls ``on_stop(reason)`` once when the run must
    end (cancel requested, fenced, runtime limit). Transient API errors are logged and retried
    at the next beat (the lease outlives several beats)."""

    def __init__(
        self,
        api: InternalApi,
        *,
        interval_s: float,
        on_stop: Callable[[str], None],
        max_runtime_s: float | None = None,
    ) -> None:
        self._api = api
        self._interval_s = interval_s
        self._on_stop = on_stop
        self._deadline = time.monotonic() + max_runtime_s if max_runtime_s else None
        self._stop = threading.Event()
        self._told = False
        self._thread = threading.Thread(target=self._run, name="shunter-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat(self) -> str | None:
        """One heartbeat; the reason to stop, or None."""
        if self._deadline is not None and time.monotonic() > self._deadline:
            return "max_runtime_seconds exceeded"
        try:
            reply = self._api.heartbeat()
        except AttemptFenced as e:
            return f"fenced: {e}"
        except ApiError as e:
            log.warning("heartbeat failed (will retry): %s", e)
            return None
        if reply.get("checkpoint_now") and not self._told:
            self._told = True  # the workers act on it at their next step boundary
            log.info("checkpoint-now requested: %s", reply.get("stop_detail"))
        return "cancel requested" if reply.get("cancel_requested") else None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            reason = self.beat()
            if reason is not None:
                self._on_stop(reason)
                return

    def stop(self) -> None:
        self._stop.set()


def preflight(spec: JobSpec) -> ErrorInfo | None:
    """Cheap checks before starting workers: local dataset files exist. Pure but for stat()."""
    for split, src in (("train", spec.data.train), ("eval", spec.data.eval)):
        path = src.path if src is not None else None
        if path and os.path.isabs(path) and not os.path.exists(path):
            return ErrorInfo(type="user_error", message=f"data.{split}.path does not exist: {path}")
    return None


def preflight_inputs(inputs: dict[str, Any] | None) -> ErrorInfo | None:
    """The stored objects the job reads (``payload["inputs"]``) are there and their manifests
    hash to the digests submit recorded: one small read each, before any worker starts (a
    corrupt block is found where it is fetched, ``worker.object_cache``)."""
    from worker.object_cache import DataCorrupt, ManifestSource

    for ref, entry in sorted((inputs or {}).items()):
        if not isinstance(entry, dict) or not entry.get("digest") or not entry.get("uri"):
            continue  # a listed uri: checked file by file as it is fetched
        try:
            ManifestSource(str(entry["uri"]), name=ref, digest=str(entry["digest"])).manifest()
        except DataCorrupt as e:
            return classify(e)
    return None


# Ray's built-in per-node label (ray.util.placement_group.NODE_ID_LABEL_KEY).
_NODE_ID_LABEL = "ray.io/node-id"


def only_nodes_selector(only: list[str], avoid: list[str]) -> dict[str, str] | None:
    """The workers' Ray label selector that keeps them on ``only`` (the nodes of the
    accelerator type the scheduler placed the attempt on; [] = any node) and off ``avoid``
    (cordoned), or None when neither applies."""
    wanted = {n for n in only if n}
    if not wanted:
        return avoid_nodes_selector(avoid)
    # Every node of the type cordoned: the type still holds (a cordon only steers).
    keep = sorted(wanted - set(avoid)) or sorted(wanted)
    return {_NODE_ID_LABEL: f"in({','.join(keep)})"}


def avoid_nodes_selector(node_ids: list[str]) -> dict[str, str] | None:
    """The workers' Ray label selector that keeps them off ``node_ids`` (the nodes the
    straggler watch cordoned when this attempt asked for its spec), or None."""
    ids = sorted({n for n in node_ids if n})
    return {_NODE_ID_LABEL: f"!in({','.join(ids)})"} if ids else None


def build_trainer(payload: dict[str, Any], env: dict[str, str]) -> Any:
    """The Ray Train trainer for one attempt (``payload`` is the ``GET spec`` reply): a
    data-parallel trainer with the torchrun environment as its backend, so this process and
    the Train controller never import torch (``worker.ray_trainer``)."""
    from ray.train import (
        CheckpointConfig,
        FailureConfig,
        RunConfig,
        ScalingConfig,
    )

    from worker.checkpoint_callback import ApiCallback, OutboxFlush, RestartWatch
    from worker.ray_trainer import ShunterTrainer, TorchEnvConfig
    from worker.staging import stage_dir
    from worker.train_fn import train_loop_per_worker

    spec = JobSpec.model_validate(payload["spec"])  # validated at submit; typed from here on
    output_uri = str(payload["output_dir"])
    output_dir = Path(output_uri)
    res = spec.resources
    per_worker: dict[str, float] = {"CPU": res.cpus_per_worker}
    if res.gpus_per_worker > 0:
        per_worker["GPU"] = float(res.gpus_per_worker)
    max_steps = spec.training.max_steps
    resume_from = payload.get("resume_from")
    identity = attempt_identity(env)
    callback = ApiCallback(**identity)
    restarts = RestartWatch(**identity, resume_from=resume_from)  # restarts become events
    flush = OutboxFlush(job_id=identity["job_id"], attempt=identity["attempt"])
    loop_config: dict[str, Any] = {
        "spec": spec.model_dump(mode="json"),
        "output_dir": str(output_dir),
        "resume_from": resume_from,
        "total_steps": max_steps if max_steps > 0 else None,
        # One tokenised-data cache for every job on this storage (keyed by data, tokenizer
        # and settings): a second job on the same data skips tokenising.
        "cache_dir": str(output_dir.parent / ".cache" / "tokenized"),
        # Stored datasets and models the spec names, resolved at submit (worker.inputs).
        "inputs": payload.get("inputs") or {},
    }
    storage_kw: dict[str, Any] = {"name": output_dir.name, "storage_path": str(output_dir.parent)}
    if storage.is_remote(output_uri):
        # Object storage: the workers train into node-local staging and Ray Train uploads
        # each checkpoint to <bucket>/<prefix>/<job>/checkpoint-<step> (worker.staging).
        stage = stage_dir(identity["job_id"], identity["attempt"])
        loop_config |= {
            "output_dir": str(stage),
            "storage_uri": output_uri,
            "cache_dir": str(stage.parents[1] / ".cache" / "tokenized"),
        }
        fs, base = storage.resolve(output_uri)
        storage_kw = {
            "name": posixpath.basename(base),
            "storage_path": posixpath.dirname(base),
            "storage_filesystem": fs,  # carries the endpoint override (self-hosted S3)
        }
    only = [n for n in env.get(ONLY_NODES_ENV, "").split(",") if n]
    selector = only_nodes_selector(only, list(payload.get("avoid_nodes") or []))
    avoid: dict[str, Any] = {"label_selector": selector} if selector else {}
    return ShunterTrainer(
        train_loop_per_worker,
        backend_config=TorchEnvConfig(),
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(
            num_workers=res.max_workers,  # the attempt's width: its spec is rigid (stored_at_width)
            use_gpu=res.gpus_per_worker > 0,
            resources_per_worker=per_worker,
            # Cordoned nodes (service.health.straggler): no worker is placed on them (Ray Train
            # v2's ScalingConfig, which the launcher turns on; absent when none is cordoned).
            **avoid,
        ),
        run_config=RunConfig(
            **storage_kw,
            failure_config=FailureConfig(max_failures=spec.max_restarts),
            # One owner prunes checkpoints: trainer_core, which keeps the newest
            # ``save_total_limit`` and the best (HF semantics, needed by
            # load_best_model_at_end). Ray pruning too deletes directories trainer_core already
            # removed, and its delete raises FileNotFoundError, failing the run (seen with
            # save_total_limit 3 and a restarted worker group).
            checkpoint_config=CheckpointConfig(num_to_keep=None),
            # The flush last: when training ends, the queued registrations land before the
            # driver's final status (which fences the attempt).
            callbacks=[callback, restarts, flush],  # type: ignore[list-item]
        ),
        # No resume_from_checkpoint (deprecated in Ray Train v2, it raises): the reporter hands
        # trainer_core ``resume_from`` when Ray has no checkpoint of its own for this run.
    )


def _result(output_dir: str) -> dict[str, Any]:
    """Rank 0's ``TrainResult`` of this attempt ({} when it is missing or unreadable)."""
    from worker.train_fn import RESULT_FILE

    try:
        result = json.loads(storage.read_bytes(storage.join(output_dir, RESULT_FILE)))
    except (OSError, ValueError):
        return {}
    return result if isinstance(result, dict) else {}


def _remaining_runtime(spec: JobSpec, payload: dict[str, Any]) -> float | None:
    """Seconds this attempt may run: max_runtime_seconds minus what earlier attempts used."""
    limit = spec.max_runtime_seconds
    if not limit:
        return None
    return float(limit) - float(payload.get("runtime_used_s") or 0.0)


def run(api: InternalApi, env: dict[str, str]) -> int:
    if startup_trace.enabled():  # bench/startup.py --trace
        startup_trace.mark("driver", "main", time.time())
    log.info(
        "driver pid %d for job %s attempt %d on ray %s",
        os.getpid(),
        api.job_id,
        api.attempt,
        env.get("RAY_ADDRESS"),
    )
    payload = api.spec()
    spec = JobSpec.model_validate(payload["spec"])
    api.status("running", versions=installed_versions())

    def _stop(reason: str) -> None:
        log.warning("stopping this attempt: %s", reason)
        if reason.startswith("max_runtime"):
            err = {"type": "timeout", "message": reason}
            try:
                api.status("failed", error=err)
            except ApiError as e:
                log.warning("could not report the timeout: %s", e)
        flush_installed(2.0)  # the last lines reach the durable log
        os._exit(EXIT_FENCED)  # ends the Ray job; Ray tears down the controller and workers

    remaining = _remaining_runtime(spec, payload)
    if remaining is not None and remaining <= 0:
        msg = "max_runtime_seconds exceeded (earlier attempts used it up)"
        api.status("failed", error={"type": "timeout", "message": msg})
        return 1
    beat = Heartbeat(
        api,
        interval_s=float(env.get("SHUNTER_HEARTBEAT_S", "5")),
        on_stop=_stop,
        max_runtime_s=remaining,
    )
    beat.start()
    problem = preflight(spec) or preflight_inputs(payload.get("inputs"))
    if problem is not None:
        api.status("failed", error=problem.as_dict())
        return 1
    from worker.train_fn import RESULT_FILE

    storage.delete_tree(storage.join(payload["output_dir"], RESULT_FILE))  # an earlier attempt's
    if startup_trace.enabled():  # bench/startup.py --trace
        startup_trace.mark("driver", "fit", time.time())
    try:
        build_trainer(payload, env).fit()
    except Exception as e:  # every failure becomes a reported error with its real cause
        info = classify(e)
        log.error("training failed (%s): %s", info.type, info.message)
        beat.stop()
        api.status("failed", error=info.as_dict())
        return 1
    beat.stop()
    result = _result(str(payload["output_dir"]))
    if result.get("interrupted"):  # checkpointed on request: the API requeues or pauses the job
        log.info("stopped at step %s: %s", result.get("global_step"), result["interrupted"])
        api.status("preempted", step=int(result.get("global_step") or 0))
        return 0
    final = result.get("final_model_dir")
    api.status("succeeded", final_model_uri=str(final) if final else None)
    return 0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    gcs = os.environ.get(RAY_GCS_ADDRESS_ENV)
    if gcs:
        # The job supervisor set RAY_ADDRESS by its own auto-detection, which can name another
        # Ray instance on this machine; the launcher knows the cluster this job was submitted
        # to. The Train controller and workers are then placed there, whatever else runs here.
        os.environ["RAY_ADDRESS"] = gcs
    env = dict(os.environ)
    api = InternalApi(
        **attempt_identity(env),
        # ~3.5 minutes of retries: the final status must survive a service restart, the
        # database away or this node cut off from the API for a minute (docs/reliability.md),
        # or the finished attempt is lost and rerun from its last checkpoint.
        retry=RetryPolicy(attempts=30, base_s=0.5, max_s=8.0),
    )
    shipper = LogShipper(api)  # this process's and the workers' output -> the API's store
    shipper.start()
    try:
        return run(api, env)
    except AttemptFenced as e:
        log.warning("attempt fenced: %s", e)
        return EXIT_FENCED
    finally:
        shipper.close()
        api.close()


def warm_main(channel: Any) -> int:
    """The driver in a warm process (``worker.launch_driver``): ``main()``'s exit code."""
    from worker import warm

    warm.payload(channel)
    return main()


if __name__ == "__main__":
    sys.exit(main())
