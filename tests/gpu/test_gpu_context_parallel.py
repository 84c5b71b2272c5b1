"""The GPU set (issue 29): context parallelism's ring attention on CUDA.

torch 2.13 runs ``context_parallel``'s ring attention only on the CUDA SDPA kernels (on CPU
the first attention call raises: ``scripts/cp_cpu_probe.py``), so this is where the whole
CP step is checked: the tiny Llama (SDPA, fp32, so torch picks the memory-efficient kernel,
one of the three CP dispatches) trains 8 AdamW steps on a ``dp x cp`` mesh through
``build_engine`` and ``cp_forward_backward`` with the loop's arithmetic, and every step's
global loss equals one process on the whole batch (full sequences, its padding mask, the
usual shifted loss) to ``TOL``; the final weights match too.

Ranks: with two or more GPUs, NCCL, one GPU per rank, ``cp = 2`` and ``dp`` the rest (the
bar's 2 x 2 on four GPUs). With one GPU (the lent H100/H200), two ranks share it over gloo
(NCCL refuses two ranks on one device) with the ``allgather`` rotation.

Written without a GPU at hand (session H2): not yet run. Run with ``make test-gpu``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer_core.test_strategies_harness import TINY_LLAMA, free_port

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="no CUDA device: the GPU set needs one (run `make test-gpu` on a GPU node)",
    ),
]

TOL = 1e-4
STEPS, ROWS, LENGTH, LR = 8, 4, 128, 1e-3
LLAMA = {**TINY_LLAMA, "max_position_embeddings": 2 * LENGTH}


def _batch(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(1, LLAMA["vocab_size"], (ROWS, LENGTH), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 100:] = 0  # right padding of unequal lengths: the global count decides the mean
    mask[3, 37:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**LLAMA, attn_implementation="sdpa"))


def _reference(device: torch.device) -> tuple[list[float], dict[str, torch.Tensor]]:
    from trainer_core.tasks.base import token_cross_entropy

    model = _model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        b = {k: v.to(device) for k, v in _batch(step).items()}
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        summed, count, _ = token_cross_entropy(logits, b["labels"], shift=True)
        (summed / count).backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(summed.detach() / count))
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _rank(rank: int, world: int, port: int, backend: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    from trainer_core.parallel import ParallelConfig, build_engine
    from trainer_core.parallel.context import cp_forward_backward
    from trainer_core.tasks.base import token_cross_entropy

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))  # fmt: skip
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    if backend == "gloo":
        set_rotate_method("allgather")
    try:
        engine = build_engine(
            _model(),
            ParallelConfig(strategy="ddp", context_parallel_size=2),
            make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=LR),
            device=device,
        )

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
        if rank == 0:
            state = {k: v.cpu().tolist() for k, v in engine.unwrapped.state_dict().items()}
            Path(out).write_text(json.dumps({"losses": losses, "state": state}))
    finally:
        dist.destroy_process_group()


def test_dp_by_cp_ring_attention_equals_one_process(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    gpus = torch.cuda.device_count()
    world, backend = (gpus - gpus % 2, "nccl") if gpus >= 2 else (2, "gloo")
    want, want_state = _reference(torch.device("cuda", 0))
    out = tmp_path / "cp.json"
    mp.spawn(_rank, args=(world, free_port(), backend, str(out)), nprocs=world, join=True)
    got = json.loads(out.read_text())
    assert want[-1] < want[0]  # it learns
    assert got["losses"] == pytest.approx(want, abs=TOL), (got["losses"], want)
    for key, value in want_state.items():
        torch.testing.assert_close(torch.tensor(got["state"][key]), value, atol=1e-4, rtol=1e-3)
