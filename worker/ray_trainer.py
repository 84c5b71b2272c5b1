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

``ShunterTrainer`` can also run Ray Train's controller in the driver process instead of a
controller actor (the default; ``SHUNTER_TRAIN_CONTROLLER=actor`` gives the actor back, see
``controller_in_driver``). The actor is one more
Ray worker process per job start, started only once the driver is connected, which then
imports Ray Train (~1.4 s of CPU) and unpickles the trainer before it can place the worker
group; the driver (a warm child of the driver template) has all of it imported already.
The controller is the same ``TrainController`` object running the same control loop: it
starts the worker group, polls it, restarts it on a worker failure (``FailureConfig``), and
runs the callbacks (``worker.checkpoint_callback``). What it owns (worker actors, their
placement group, the synchronization actor) is owned by the driver instead, so it dies with
the driver exactly as it died with the controller the driver owned: a cancel, a fence or a
killed driver ends them all. Measured in docs/execution.md ("Where a warm job's start goes").
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import ray
import ray.train
from ray.train._internal.utils import get_address_and_port
from ray.train.backend import Backend, BackendConfig
from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError
from ray.train.v2._internal.execution.controller import TrainController
from ray.train.v2._internal.execution.worker_group import WorkerGroup
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

__all__ = [
    "CONTROLLER_ENV",
    "SYNC_ACTOR_ENV",
    "ShunterTrainer",
    "TorchEnvConfig",
    "controller_in_driver",
    "sync_actor_last",
]

CONTROLLER_ENV = "SHUNTER_TRAIN_CONTROLLER"  # "driver" (default) or "actor" (Ray Train's own)
SYNC_ACTOR_ENV = "SHUNTER_TRAIN_SYNC_ACTOR"  # "last" (default) or "first" (Ray Train's order)


def controller_in_driver(env: dict[str, str] | None = None) -> bool:
    """Whether the Train controller runs in the driver process (the default; ``actor`` in
    ``SHUNTER_TRAIN_CONTROLLER`` gives Ray Train's own controller actor back).

    The driver path halves a warm job's start (docs/execution.md). It was opt-in until the
    chaos e2e set had run with it: faults (cancel, killed worker, killed driver), preemption,
    hang, Ray head lost, network cut, multinode and storage faults passed twice each with it,
    private disks (FSDP, ZeRO-3 with a killed raylet) 4 of 4 and once more, the rest of the
    job-starting e2e files once (2026-11-27, docs/execution.md)."""
    value = (env if env is not None else os.environ).get(CONTROLLER_ENV, "driver")
    return value.strip().lower() != "actor"


def sync_actor_last(env: dict[str, str] | None = None) -> bool:
    """Whether a driver-side controller asks for the ranks before the synchronization actor."""
    value = (env if env is not None else os.environ).get(SYNC_ACTOR_ENV, "last")
    return value.strip().lower() != "first"


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
    """``DataParallelTrainer`` without the placement group cleaner, without the Ray Data
    callback when there are no datasets, and with its controller in the driver process."""

    def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
        if not controller_in_driver():
            return super()._initialize_and_run_controller(**controller_init_kwargs)
        # What the actor would have run: TrainController(**kwargs); run(); get_result().
        # The environment Ray Train propagates to its controller is this process's own.
        controller = _DriverController(**controller_init_kwargs)
        asyncio.run(controller.run())  # type: ignore[no-untyped-call]
        return controller.get_result()

    def _create_default_callbacks(self) -> list[Any]:
        callbacks: list[Any] = super()._create_default_callbacks()
        left_out = {"PlacementGroupCleanerCallback"}
        if not self.datasets:
            left_out.add("DatasetsCallback")
        return [cb for cb in callbacks if type(cb).__name__ not in left_out]


class _DriverWorkerGroup(WorkerGroup):
    """Ray Train's ``WorkerGroup`` for a controller that is not an actor.

    - The workers' train context gets no controller handle (Ray's code passes
      ``current_actor``, which raises outside an actor). The handle serves only
      ``ray.train.get_all_reported_checkpoints``, which our training function never calls
      (it reads ``ray.train.get_checkpoint``).
    - The rank actors are asked for before the synchronization actor (``SYNC_ACTOR_ENV``,
      default ``last``). Ray Train asks for the synchronization actor first, then the ranks;
      a raylet starts at most ``num_cpus`` worker processes at a time, so on a small node the
      last rank's process waited for the synchronization actor's (~2 s on 2 loaded cores).
      Nothing calls the synchronization actor before the first ``ray.train.report`` (a
      checkpoint, or the end): the workers only receive its handle. So the ranks start
      together, and the synchronization actor's process starts while the group sets up.
    """

    _early_workers: list[Any] | None = None

    def _create_placement_group(self, scaling_config: Any, worker_group_context: Any) -> Any:
        pg_handle = super()._create_placement_group(scaling_config, worker_group_context)
        if not sync_actor_last():
            return pg_handle
        # Ray Train's next steps: wait for the placement group, ask for the synchronization
        # actor, then _create_workers. The ranks are created here instead, right after the
        # wait, and _create_workers hands them over.
        if not pg_handle.wait(self._worker_group_start_timeout_s):
            pg_handle.shutdown()
            raise WorkerGroupStartupTimeoutError(num_workers=worker_group_context.num_workers)
        try:
            self._early_workers = self._create_workers(
                worker_group_context.num_workers,
                pg_handle.placement_group,
                worker_group_context.resources_per_worker,
                replica_group_size=1 if self._manages_replica_groups else None,
            )
        except BaseException:
            pg_handle.shutdown()  # not yet in the group's state, which would remove it
            raise
        return pg_handle

    def _create_workers(self, *args: Any, **kwargs: Any) -> list[Any]:
        early, self._early_workers = self._early_workers, None
        if early is not None:
            return early
        workers: list[Any] = super()._create_workers(*args, **kwargs)
        return workers

    def _init_train_context_on_workers(
        self, workers: list[Any], sync_actor: Any, train_context_args: dict[str, list[Any]]
    ) -> None:
        # Ray 2.60's body of this method, with controller_actor=None.
        ray.get(
            [
                worker.actor.init_train_context.remote(
                    train_run_context=self._train_run_context,
                    distributed_context=worker.distributed_context,
                    synchronization_actor=sync_actor,
                    storage_context=self._storage_context,
                    worker_callbacks=self._worker_callbacks_to_propagate,
                    controller_actor=None,
                    **{arg: values[i] for arg, values in train_context_args.items()},
                )
                for i, worker in enumerate(workers)
            ]
        )
        self._decorate_worker_log_file_paths(workers)


class _DriverController(TrainController):
    """Ray Train's controller, run in the driver process (``ShunterTrainer``)."""

    worker_group_cls = _DriverWorkerGroup
