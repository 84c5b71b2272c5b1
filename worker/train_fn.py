"""What each Ray Train worker runs: ``trainer_core.train`` with a ``RayReporter``.

Imported by the workers from our source tree (``PYTHONPATH`` set by the launcher), so the
function is pickled by reference, not by value. Heavy libraries load here, in the worker,
never in the driver's import path.

Rank 0 writes ``<output_dir>/shunter_result.json`` (final model dir, steps) after training, on
the shared storage the driver reads; Ray Train v2 does not return the function's value.

On object storage (``config["storage_uri"]`` set) ``output_dir`` is a node-local staging
directory (``worker.staging``): a checkpoint to resume from (Ray's newest of this run, else the
attempt's ``resume_from``) and a ``model.init_from`` checkpoint are downloaded into it first;
checkpoints are uploaded by Ray Train as they are reported (``RayReporter``); rank 0 uploads
the final model to ``<storage_uri>/final`` and writes the result there, naming its URI.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["RESULT_FILE", "train_loop_per_worker"]

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


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """``config``: ``{"spec": JobSpec dict, "output_dir": str, "resume_from": str | None,
    "total_steps": int | None, "cache_dir": str | None}``."""
    import logging
    import time

    t0 = time.time()
    # trainer_core logs resume points and checkpoint problems at INFO; Ray's default is WARNING.
    logging.getLogger("trainer_core").setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    import ray.train

    from shunter.jobspec import JobSpec
    from trainer_core import train
    from trainer_core.config import TrainConfig
    from worker.internal_api import InternalApi, MetricsSender, StopWatch
    from worker.ray_reporter import RayReporter

    rank = ray.train.get_context().get_world_rank()
    print(
        f"shunter: rank {rank} entered the training function at {t0:.3f}; imports took "
        f"{time.time() - t0:.1f}s",
        flush=True,
    )
    sender = stop_watch = None
    if rank == 0:
        api = InternalApi(
            api_url=os.environ["SHUNTER_API_URL"],
            token=os.environ["SHUNTER_ATTEMPT_TOKEN"],
            job_id=os.environ["SHUNTER_JOB_ID"],
            attempt=int(os.environ["SHUNTER_ATTEMPT"]),
        )
        sender = MetricsSender(api)
        # Checkpoint-now requests (preemption, pause) arrive in heartbeat replies.
        stop_watch = StopWatch(api, interval_s=float(os.environ.get("SHUNTER_STOP_POLL_S", "2")))
    cache_dir = config.get("cache_dir")
    storage_uri: str | None = config.get("storage_uri")
    local_rank = ray.train.get_context().get_local_rank()
    spec_doc, resume_from = config["spec"], config.get("resume_from")
    if storage_uri:
        spec_doc, resume_from = _localized(config, local_rank=local_rank)
    cfg = TrainConfig.from_spec(
        JobSpec.model_validate(spec_doc),  # validated at submit; typed from here on
        output_dir=config["output_dir"],
        cache_dir=Path(cache_dir) if cache_dir else None,
    )
    reporter = RayReporter(
        rank=rank,
        sender=sender,
        resume_from=resume_from,
        total_steps=config.get("total_steps"),
        stop_watch=stop_watch,
        upload=bool(storage_uri),
        local_rank=local_rank,
    )
    try:
        result = train(cfg, reporter)
    finally:
        reporter.close()
    if storage_uri:
        _publish(
            result, rank=rank, local_rank=local_rank, storage_uri=storage_uri, stage=cfg.output_dir
        )
    elif rank == 0:
        out = Path(config["output_dir"]) / RESULT_FILE
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(_jsonable(result)))
        tmp.replace(out)


def _localized(config: dict[str, Any], *, local_rank: int) -> tuple[dict[str, Any], str | None]:
    """The spec and resume point with object-storage checkpoints replaced by local copies."""
    import ray.train

    from service import storage
    from worker.staging import localize

    stage = Path(config["output_dir"])
    ckpt = ray.train.get_checkpoint()  # Ray's newest of this run (a worker-group restart)
    start = storage.to_uri(ckpt.filesystem, ckpt.path) if ckpt else config.get("resume_from")
    resume_from = str(localize(start, stage / "resume", local_rank=local_rank)) if start else None
    spec = config["spec"]
    init = (spec.get("model") or {}).get("init_from")
    if isinstance(init, dict) and init.get("path") and storage.is_remote(init["path"]):
        path = str(localize(init["path"], stage / "init", local_rank=local_rank))
        spec = {**spec, "model": {**spec["model"], "init_from": {**init, "path": path}}}
    return spec, resume_from


def _publish(result: Any, *, rank: int, local_rank: int, storage_uri: str, stage: Path) -> None:
    """Object storage: rank 0 uploads the final model and the result; then, once every rank
    is past that (a report is a barrier), each node's local rank 0 removes its staging dir."""
    import shutil

    import ray.train

    from service import storage

    if rank == 0:
        doc = _jsonable(result)
        if result.final_model_dir is not None:
            final_uri = storage.join(storage_uri, "final")
            storage.upload_dir(result.final_model_dir, final_uri)
            doc["final_model_dir"] = final_uri
        storage.write_bytes(storage.join(storage_uri, RESULT_FILE), json.dumps(doc).encode())
    ray.train.report({"step": int(result.global_step)})
    if local_rank == 0:
        shutil.rmtree(stage, ignore_errors=True)
