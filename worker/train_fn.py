"""What each Ray Train worker runs: ``trainer_core.train`` with a ``RayReporter``.

Imported by the workers from our source tree (``PYTHONPATH`` set by the launcher), so the
function is pickled by reference, not by value. Heavy libraries load here, in the worker,
never in the driver's import path.

Rank 0 writes ``<output_dir>/shunter_result.json`` (final model dir, steps) after training, on
the shared storage the driver reads; Ray Train v2 does not return the function's value.
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
    cfg = TrainConfig.from_spec(
        JobSpec.model_validate(config["spec"]),  # validated at submit; typed from here on
        output_dir=config["output_dir"],
        cache_dir=Path(cache_dir) if cache_dir else None,
    )
    reporter = RayReporter(
        rank=rank,
        sender=sender,
        resume_from=config.get("resume_from"),
        total_steps=config.get("total_steps"),
        stop_watch=stop_watch,
    )
    try:
        result = train(cfg, reporter)
    finally:
        reporter.close()
    if rank == 0:
        out = Path(config["output_dir"]) / RESULT_FILE
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(_jsonable(result)))
        tmp.replace(out)
