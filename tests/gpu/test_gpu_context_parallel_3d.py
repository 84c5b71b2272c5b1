"""The GPU set (issue 29): the 3-D ``dp x cp x tp`` mesh (strategy fsdp+tp with
``context_parallel_size``) with real ring attention on CUDA.

The tiny Llama (SDPA, fp32: the memory-efficient kernel, one of the CP dispatches) trains 8
AdamW steps through ``build_engine`` (Megatron TP plan on the ``tp`` sub-mesh, FSDP2 over
the flattened ``dp_cp``) and ``cp_forward_backward`` (sequence buffers sharded over ``cp``,
SDPA swapped for ring attention on the local ``heads / tp`` heads) with the loop's
arithmetic; every step's global loss equals one process on the whole batch (full
sequences, padding mask, shifted loss: ``test_gpu_context_parallel._reference``) to ``TOL``,
and so do the final weights. On CPU the same composition is tested without attention
(``tests/trainer_core/test_context_parallel_3d.py``).

Ranks: with 8+ GPUs NCCL over 2 x 2 x 2; with 4-7, NCCL over 1 x 2 x 2; with fewer, four
ranks share GPU 0 over gloo (NCCL refuses two ranks on one device) with the ``allgather``
ring rotation; whether gloo's collectives on CUDA tensors carry FSDP2 there is itself
unchecked.

Written without a GPU at hand: never run. Run with ``make test-gpu``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gpu.test_gpu_context_parallel import LR, ROWS, STEPS, TOL, _batch, _model, _reference
from tests.trainer_core.test_strategies_harness import free_port

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device: the GPU set needs one (run `make test-gpu` on a GPU node)",
    ),
]


def _rank(rank: int, world: int, port: int, backend: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    from trainer_core.parallel import ParallelConfig, build_engine
    from trainer_core.parallel.context import cp_forward_backward
    from trainer_core.parallel.torch_engine import TorchEngine
    from trainer_core.tasks.base import token_cross_entropy

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))  # fmt: skip
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    if backend == "gloo":
        set_rotate_method("allgather")
    try:
        cfg = ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2, context_parallel_size=2)
        engine = build_engine(
            _model(),
            cfg,
            make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=LR),
            device=device,
        )
        assert isinstance(engine, TorchEngine)
        unwrapped: Any = engine.unwrapped
        q = unwrapped.model.layers[0].self_attn.q_proj.weight
        assert isinstance(q, DTensor) and q.device_mesh.mesh_dim_names == ("dp_cp", "tp")

        def summed_loss(output: Any, labels: torch.Tensor) -> torch.Tensor:
            return token_cross_entropy(output.logits, labels, shift=False)[0]

        rows = ROWS // engine.dp_size
        losses = []
        for step in range(STEPS):
            full = _batch(step)
            mine = {
                k: v[engine.dp_rank * rows : (engine.dp_rank + 1) * rows] for k, v in full.items()
            }
            # The loop's arithmetic (trainer_core.train_step.train_step).
            count = torch.tensor(float(int((mine["labels"][:, 1:] != -100).sum())), device=device)
            global_count = (engine.reduce_sum(count) / engine.cp_size).clamp_(min=1.0)
            scale = engine.dp_size * engine.cp_size / global_count
            summed = cp_forward_backward(engine, mine, scale, summed_loss)
            engine.clip_and_step(None)
            losses.append(float(engine.reduce_sum(summed.detach()) / global_count))
        state = engine.full_state_dict()  # collective; rank 0 keeps it
        if rank == 0:
            full_state = {k: v.cpu().tolist() for k, v in state.items()}
            Path(out).write_text(json.dumps({"losses": losses, "state": full_state}))
    finally:
        dist.destroy_process_group()


def test_dp_cp_tp_ring_attention_equals_one_process(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    gpus = torch.cuda.device_count()
    world, backend = (8, "nccl") if gpus >= 8 else (4, "nccl") if gpus >= 4 else (4, "gloo")
    want, want_state = _reference(torch.device("cuda", 0))
    out = tmp_path / "cp3d.json"
    mp.spawn(_rank, args=(world, free_port(), backend, str(out)), nprocs=world, join=True)
    got = json.loads(out.read_text())
    assert want[-1] < want[0]  # it learns
    assert got["losses"] == pytest.approx(want, abs=TOL), (got["losses"], want)
    for key, value in want_state.items():
        torch.testing.assert_close(torch.tensor(got["state"][key]), value, atol=1e-4, rtol=1e-3)
