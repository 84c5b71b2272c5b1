"""What each Ray Train worker runs: ``trainer_core.train`` with a ``RayReporter``.

Imported by the workers from our source tree (``PYTHONPATH`` set by the launcher), so the
function is pickled by reference, not by value. Heavy libraries load here, in the worker,
never in the driver's import path.

The training itself (``run_training``) runs in a warm process: a child of the node's ``train``
template (``worker.warm``), which has torch, transformers, datasets and trainer_core imported
already; the Ray worker answers its Ray calls (``worker.ray_side``) until it ends, and raises
what it raised. With ``SHUNTER_WARM_WORKERS=0``, or when no child can be had, it runs here.

Rank 0 writes ``<output_dir>/shunter_result.json`` (final model dir, steps) after training, on
the shared storage the driver reads; Ray Train v2 does not return the function's value.

On object storage (``config["storage_uri"]`` set) ``output_dir`` is a node-local staging
directory (``worker.staging``): a checkpoint to resume from (Ray's newest of this run, else the
attempt's ``resume_from``) and a ``model.init_from`` checkpoint get a node-local view there
(their manifests), through which each rank fetches only what it reads; checkpoints are
uploaded by Ray Train as they are reported (``RayReporter``); rank 0 uploads the final model
to ``<storage_uri>/final`` and writes the result there, naming its URI.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shunter.wire import attempt_identity

if TYPE_CHECKING:
    from worker.inputs import NodeInputs
    from worker.ray_side import RaySide, WorkerContext

__all__ = ["RESULT_FILE", "run_training", "train_loop_per_worker", "warm_main"]

RESULT_FILE = "shunter_result.json"


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


SPOOL_NAME = "metrics-spool.jsonl"  # worker.ray_reporter: points a checkpoint ran ahead of


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """What Ray Train runs in each worker. ``config``: ``{"spec": JobSpec dict, "output_dir":
    str, "resume_from": str | None, "total_steps": int | None, "cache_dir": str | None,
    "inputs": the job's stored datasets and models, resolved at submit (``worker.inputs``)}``.

    Trains in a warm process forked for this worker (``worker.warm``), answering its Ray
    calls here, or, when warm processes are off or unavailable, in this process."""
    import logging
    import time

    t0 = time.time()
    from worker import warm
    from worker.ray_side import InProcessRay, worker_context

    ctx = worker_context()
    print(
        f"shunter: rank {ctx.rank} entered the training function at {t0:.3f}; imports took "
        f"{time.time() - t0:.1f}s",
        flush=True,
    )
    ray_side = InProcessRay()
    if warm.enabled("train"):
        try:
            child = warm.spawn(
                "train",
                "worker.train_fn:warm_main",
                modules=warm.TEMPLATES["train"],
                watch_pid=warm.find_raylet(),  # the zygote lives as long as the node's raylet
                idle_s=float(os.environ.get("SHUNTER_WARM_IDLE_S", "900")),
            )
        except warm.WarmUnavailable as e:
            logging.getLogger(__name__).warning("rank %d trains in-process: %s", ctx.rank, e)
        else:
            print(f"shunter: rank {ctx.rank} trains in warm process {child.pid}", flush=True)
            warm.serve(child, ray_side.answer, payload=(config, ctx, t0))
            return
    run_training(config, ctx, ray_side, t0)


def warm_main(channel: Any) -> None:
    """A warm child's target (``worker.warm``): train with Ray calls relayed to the worker."""
    from worker import warm
    from worker.ray_side import RelayedRay

    config, ctx, t0 = warm.payload(channel)
    run_training(config, ctx, RelayedRay(channel), t0)


def run_training(config: dict[str, Any], ctx: WorkerContext, ray: RaySide, t0: float) -> None:
    """One rank's training, wherever it runs; ``t0``: when the Ray worker entered the
    training function (rank 0's ``workers_up``)."""
    import logging
    import time
    from datetime import UTC, datetime

    # trainer_core logs resume points and checkpoint problems at INFO; Ray's default is WARNING.
    logging.getLogger("trainer_core").setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    from shunter.jobspec import JobSpec
    from trainer_core import train
    from trainer_core.config import TrainConfig
    from worker import startup_trace
    from worker.internal_api import InternalApi, MetricsSender, StopWatch
    from worker.phases import PhaseSender
    from worker.ray_reporter import RayReporter

    rank = ctx.rank
    if startup_trace.enabled():  # bench/startup.py --trace: the set-up steps' times
        startup_trace.mark(f"rank{rank}", "training_process", time.time())
        startup_trace.install_in_trainer(rank)
    sender = stop_watch = phases = None
    api = InternalApi(**attempt_identity(os.environ))
    _report_worker(api, ctx)
    if rank == 0:
        sender = MetricsSender(api)
        phases = PhaseSender(api)  # start-up phases, measured from this function's entry
        phases.mark("workers_up", datetime.fromtimestamp(t0, UTC))
        # Checkpoint-now requests (preemption, pause) arrive in heartbeat replies.
        stop_watch = StopWatch(api, interval_s=float(os.environ.get("SHUNTER_STOP_POLL_S", "2")))
    cache_dir = config.get("cache_dir")
    storage_uri: str | None = config.get("storage_uri")
    local_rank = ctx.local_rank
    spec_doc, resume_from = config["spec"], config.get("resume_from")
    if storage_uri:
        spec_doc, resume_from = _localized(config, ray, local_rank=local_rank)
    node = _node_inputs(storage_uri, config.get("inputs"), config["output_dir"])
    if node is not None:  # stored datasets and models: through this node's cache
        spec_doc = _inputs_localized(spec_doc, config.get("inputs"), node)
    cfg = TrainConfig.from_spec(
        JobSpec.model_validate(spec_doc),  # validated at submit; typed from here on
        output_dir=config["output_dir"],
        cache_dir=Path(cache_dir) if cache_dir else None,
        shared_data=node,
    )
    reporter = RayReporter(
        rank=rank,
        sender=sender,
        resume_from=resume_from,
        total_steps=config.get("total_steps"),
        stop_watch=stop_watch,
        upload=bool(storage_uri),
        local_rank=local_rank,
        # A shared filesystem only: on object storage output_dir is node-local staging.
        spool=None if storage_uri else Path(config["output_dir"]) / SPOOL_NAME,
        phases=phases,
        ray=ray,
        storage_uri=storage_uri,
        staging=cfg.output_dir if storage_uri else None,
    )
    try:
        result = train(cfg, reporter)
    finally:
        reporter.close()
        if node is not None:
            node.cache.close()  # unpin this job's objects: evictable from now on
    if storage_uri:
        _publish(
            result,
            ray,
            rank=rank,
            local_rank=local_rank,
            storage_uri=storage_uri,
            stage=cfg.output_dir,
        )
    elif rank == 0:
        out = Path(config["output_dir"]) / RESULT_FILE
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(_jsonable(result)))
        tmp.replace(out)


def _report_worker(api: Any, ctx: WorkerContext) -> None:
    """Tell the service where this rank's training process is (its hang watch dumps its
    stacks there). Best effort: a lost report costs only that rank's stacks, never the run."""
    import logging

    try:
        api.worker(rank=ctx.rank, pid=os.getpid(), node_id=ctx.node_id, node_ip=ctx.node_ip)
    except Exception as e:  # the API unreachable or fenced: training goes on
        logging.getLogger(__name__).warning("rank %d could not report its process: %s", ctx.rank, e)


def _node_inputs(
    storage_uri: str | None, inputs: dict[str, Any] | None, output_dir: str
) -> NodeInputs | None:
    """This rank's view of the job's stored inputs and of the store's tokenised datasets
    (``worker.inputs``): on object storage, or whenever the job names stored objects. The
    storage root is the job directory's parent (``storage_uri``'s; on a shared filesystem,
    ``output_dir``'s)."""
    if not storage_uri and not inputs:
        return None
    import posixpath

    from worker.inputs import NodeInputs, tokenized_root
    from worker.object_cache import default_cache

    root = posixpath.dirname((storage_uri or output_dir).rstrip("/"))
    return NodeInputs(default_cache(), tokenized=tokenized_root(root))


def _inputs_localized(
    spec: dict[str, Any], inputs: dict[str, Any] | None, node: NodeInputs
) -> dict[str, Any]:
    from worker.inputs import localize

    try:
        return localize(spec, inputs, node)
    except BaseException:
        node.cache.close()
        raise


def _localized(
    config: dict[str, Any], ray: RaySide, *, local_rank: int
) -> tuple[dict[str, Any], str | None]:
    """The spec and resume point with object-storage checkpoints replaced by local copies."""
    import storage
    from worker.staging import localize

    stage = Path(config["output_dir"])
    # Ray's newest of this run (a worker-group restart), else the attempt's resume point.
    start = ray.checkpoint(as_uri=True) or config.get("resume_from")
    resume_from = str(localize(start, stage / "resume", local_rank=local_rank)) if start else None
    spec = config["spec"]
    init = (spec.get("model") or {}).get("init_from")
    if isinstance(init, dict) and init.get("path") and storage.is_remote(init["path"]):
        path = str(localize(init["path"], stage / "init", local_rank=local_rank))
        spec = {**spec, "model": {**spec["model"], "init_from": {**init, "path": path}}}
    return spec, resume_from


def _publish(
    result: Any, ray: RaySide, *, rank: int, local_rank: int, storage_uri: str, stage: Path
) -> None:
    """Object storage: rank 0 uploads the final model and the result; then, once every rank
    is past that (a report is a barrier), each node's local rank 0 removes its staging dir."""
    import shutil

    import storage

    if rank == 0:
        doc = _jsonable(result)
        if result.final_model_dir is not None:
            final_uri = storage.join(storage_uri, "final")
            storage.upload_dir(result.final_model_dir, final_uri)
            doc["final_model_dir"] = final_uri
        storage.write_bytes(storage.join(storage_uri, RESULT_FILE), json.dumps(doc).encode())
    ray.report({"step": int(result.global_step)})
    if local_rank == 0:
        shutil.rmtree(stage, ignore_errors=True)
