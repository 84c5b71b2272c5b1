"""Parallel strategies behind the ``Engine`` seam (``trainer_core.engine``).

``init_distributed()`` joins or creates the process group; ``build_engine(model, cfg, ...)``
applies ``cfg.strategy`` (single process, DDP, FSDP2, DeepSpeed ZeRO, TP, FSDP2+TP, and a
``dp x pp`` pipeline under DDP: ``pipeline.py``) in one place and returns an ``Engine``
whose verbs the loop calls without knowing the backend.
"""

from shunter.jobspec.deepspeed import TrainingValues
from trainer_core.parallel.build import build_engine
from trainer_core.parallel.config import ParallelConfig
from trainer_core.parallel.dist import DistInfo, init_distributed

__all__ = ["DistInfo", "ParallelConfig", "TrainingValues", "build_engine", "init_distributed"]
