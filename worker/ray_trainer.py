"""The Ray Train trainer of one attempt, built so that neither the driver nor the controller
imports torch.

``TorchTrainer`` is a ``DataParallelTrainer`` with a ``TorchConfig`` backend; importing either
imports torch (about 1.4 s of CPU here), first in the driver that builds the trainer and then
again in the Train controller that unpickles it, both on the path from submit to the first
step. Neither process trains, so neither needs torch. ``TorchEnvConfig`` does the one thing
our workers need from a backend: it gives every worker the torch.distributed environment
(``MASTER_ADDR``/``MASTER_PORT`` of rank 0, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``NODE_RANK``), the same variables ``torchrun`` sets, and
``trainer_core.parallel.dist.init_distributed`` creates the process group from them (gloo on
CPU, nccl on GPU) inside the training function, where torch is imported anyway. Like
``TorchConfig`` it shares ``CUDA_VISIBLE_DEVICES`` among the workers of a node, so NCCL sees
peer GPUs and ``LOCAL_RANK`` picks each rank's device.

(Importing the training function's libraries in a background thread as soon as the group is
up saved ~0.5 s more, but concurrent imports of torch from two threads are a known source of
rare hangs, and one CI run did hang before a first step; it was taken out.)

``ShunterTrainer`` leaves out Ray Train's Ray Data integration when the run has no Ray
Datasets (ours never do: trainer_core reads its data itself). Otherwise every worker group
start also launches a ``DatasetManager`` actor (one more Python process) and ships Ray Data's
context to every worker (importing ``ray.data`` there), about 1 s of CPU on the way to step 1.
It also leaves out the ``PlacementGroupCleaner``: a detached actor (another Python process
importing Ray Train, ~1.4 s of CPU at every start) that removes the worker group's placement
group if the controller dies while its driver lives on. Ours never does: a controller's death
fails ``fit()``, the driver reports it and exits, and Ray removes the placement groups of a
job that has ended.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray.train
from ray.train._internal.utils import get_address_and_port
from ray.train.backend import Backend, BackendConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

__all__ = ["ShunterTrainer", "TorchEnvConfig"]


def _export_train_env(master_addr: str, master_port: int) -> None:
    """Set the torch.distributed (torchrun) environment of the calling Ray Train worker."""
    ctx = ray.train.get_context()
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "RANK": str(ctx.get_world_rank()),
        "WORLD_SIZE": str(ctx.get_world_size()),
        "LOCAL_RANK": str(ctx.get_local_rank()),
        "LOCAL_WORLD_SIZE": str(ctx.get_local_world_size()),
        "NODE_RANK": str(ctx.get_node_rank()),
    }
    os.environ.update(env)


class _TorchEnvBackend(Backend):
    share_cuda_visible_devices: bool = True

    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        addr, port = worker_group.execute_single(0, get_address_and_port)
        worker_group.execute(_export_train_env, master_addr=addr, master_port=port)


@dataclass
class TorchEnvConfig(BackendConfig):
    """Ray Train backend: the torchrun environment on every worker, no process group yet."""

    @property
    def backend_cls(self) -> type[Backend]:
        return _TorchEnvBackend


class ShunterTrainer(DataParallelTrainer):
    """``DataParallelTrainer`` without the placement group cleaner, and without the Ray Data
    callback when there are no datasets."""

    def _create_default_callbacks(self) -> list[Any]:
        callbacks: list[Any] = super()._create_default_callbacks()
        left_out = {"PlacementGroupCleanerCallback"}
        if not self.datasets:
            left_out.add("DatasetsCallback")
        return [cb for cb in callbacks if type(cb).__name__ not in left_out]
