"""trainer_core: our PyTorch training loop. ``train(TrainConfig.from_spec(spec), reporter)``.

Runs standalone (``python -m trainer_core --spec job.yaml`` under torchrun) or inside Ray
Train workers (worker/). Imports nothing else of ours. Names are loaded lazily so that
``import trainer_core.engine`` (or ``.parallel``) does not pull in transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer_core.config import TrainConfig
    from trainer_core.loop import TrainResult, train
    from trainer_core.reporter import JsonlReporter, Reporter

__all__ = ["JsonlReporter", "Reporter", "TrainConfig", "TrainResult", "train"]

_HOMES = {
    "TrainConfig": "trainer_core.config",
    "TrainResult": "trainer_core.loop",
    "train": "trainer_core.loop",
    "Reporter": "trainer_core.reporter",
    "JsonlReporter": "trainer_core.reporter",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'trainer_core' has no attribute {name!r}")
