"""Process-group start-up shared by torchrun, Ray Train and a plain single process.

``init_distributed`` reads the environment torchrun and Ray Train set (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``). If a process group already
exists (a launcher made one before calling the training function) it is used as is. With no
environment and no group, this is a single process and no group is made.
Backend: ``nccl`` when the device is CUDA, ``gloo`` on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["DistInfo", "init_distributed"]


@dataclass(frozen=True, kw_only=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(*, use_cuda: bool | None = None) -> DistInfo:
    """Join (or create) the default process group and pick this rank's device.

    ``use_cuda``: ``None`` = CUDA when available; ``False`` forces CPU + gloo (a CPU job on a
    GPU host). Idempotent: a second call returns the same answer without a new group.
    """
    cuda = torch.cuda.is_available() if use_cuda is None else use_cuda
    if cuda and not torch.cuda.is_available():
        raise RuntimeError("use_cuda=True but torch sees no CUDA device; set gpus_per_worker: 0")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _pick_device(cuda, local_rank)
    if device.type == "cuda":
        # Before the group exists, so NCCL binds each rank to its own GPU.
        torch.cuda.set_device(device)
    if dist.is_available() and dist.is_initialized():
        return DistInfo(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            local_rank=local_rank,
            device=device,
        )
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        # env:// reads MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE set by the launcher.
        dist.init_process_group(backend=backend, device_id=device if cuda else None)
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def _pick_device(cuda: bool, local_rank: int) -> torch.device:
    if not cuda:
        return torch.device("cpu")
    # Ray Train narrows CUDA_VISIBLE_DEVICES to this worker's GPU(s) while LOCAL_RANK stays the
    # node-local rank, so index modulo what this process can see.
    return torch.device("cuda", local_rank % torch.cuda.device_count())
