"""The engine for every torch-native strategy: single process, DDP, FSDP2, TP, FSDP2+TP.

Strategies differ only in how the model was wrapped (done before this engine is made), in
how gradient sync is suspended (``no_sync_factory``) and in the data-parallel group; the
verbs are the same. Checkpoints always go through ``torch.distributed.checkpoint`` with
``get_state_dict``/``set_state_dict``, whose keys are the unwrapped model's (HF) names, so a
checkpoint written by one of these strategies at one world size loads into another where the
shapes allow (e.g. FSDP over 2 ranks -> FSDP over 1, DDP -> FSDP).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh

from trainer_core.fetch import CheckpointFiles
from trainer_core.parallel.dcp_files import FetchingReader, SmallFirstWriter
from trainer_core.parallel.grad_norm import clip_grad_norm

__all__ = ["TorchEngine"]


@dataclass(kw_only=True, eq=False)
class TorchEngine:
    """See ``trainer_core.engine.Engine`` for the contract of each verb.

    ``autocast_dtype``: dtype for ``torch.autocast`` around forward (``None`` = off; FSDP's
    mixed precision policy casts parameters instead). ``scaler``: fp16 grad scaler or None.
    ``dp_group``: process group of the data-parallel dimension (``None`` when ``dp_size`` is 1).
    ``cp_mesh``: the context-parallel mesh (``None`` without CP); with it ``dp_rank`` /
    ``dp_size`` say which rows a rank reads, and ``dp_group`` is the flattened ``dp x cp``
    group that gradients and ``reduce_sum`` run over.
    """

    model: nn.Module
    unwrapped: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    dp_rank: int = 0
    dp_size: int = 1
    dp_group: dist.ProcessGroup | None = None
    no_sync_factory: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    autocast_dtype: torch.dtype | None = None
    scaler: Any = None
    distributed: bool = False
    cp_mesh: DeviceMesh | None = None
    _params: list[nn.Parameter] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._params = [p for p in self.model.parameters() if p.requires_grad]

    @property
    def cp_size(self) -> int:
        return 1 if self.cp_mesh is None else self.cp_mesh.size()

    def forward(self, **batch: Any) -> Any:
        if self.autocast_dtype is None:
            return self.model(**batch)
        with torch.autocast(self.device.type, dtype=self.autocast_dtype):
            return self.model(**batch)

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()  # type: ignore[no-untyped-call]

    def no_sync(self) -> AbstractContextManager[None]:
        return self.no_sync_factory()

    def clip_and_step(
        self, max_grad_norm: float | None, skip: Callable[[torch.Tensor], bool] | None = None
    ) -> torch.Tensor:
        if self.scaler is not None:
            # Unscale before measuring so the norm and the clip are in true units.
            self.scaler.unscale_(self.optimizer)
        norm = clip_grad_norm(self._params, max_grad_norm)
        if skip is not None and skip(norm):  # the divergence guard: leave params untouched
            if self.scaler is not None:
                self.scaler.update()  # an inf backs the scale off, as a skipped fp16 step does
        elif self.scaler is not None:
            # Skips the step on inf/nan and adjusts the scale; kept beside the step on purpose.
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.dp_size * self.cp_size == 1:
            return t
        out = t.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=self.dp_group)
        return out

    def _state(self) -> dict[str, Any]:
        """What a checkpoint holds: this rank's (possibly sharded) model and optimizer state
        dicts, and the fp16 loss scaler's, by name."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def save(self, directory: Path) -> None:
        state = self._state()
        dcp.save(  # type: ignore[attr-defined]
            state,
            checkpoint_id=str(directory),
            storage_writer=SmallFirstWriter(directory),
            no_dist=not self.distributed,
        )

    def load(self, directory: Path, files: CheckpointFiles | None = None) -> None:
        # The current (possibly sharded) state dicts are the templates DCP reads into, so
        # each rank reads exactly its own shards, whatever world size wrote them.
        state = self._state()
        dcp.load(  # type: ignore[attr-defined]
            state,
            checkpoint_id=str(directory),
            storage_reader=None if files is None else FetchingReader(files),
            no_dist=not self.distributed,
        )
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        if not self.distributed:
            return {k: v.detach().cpu() for k, v in self.unwrapped.state_dict().items()}
        # Collective: every rank gathers; with cpu_offload only rank 0 keeps the result.
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return dict(get_model_state_dict(self.model, options=options))  # type: ignore[arg-type]
