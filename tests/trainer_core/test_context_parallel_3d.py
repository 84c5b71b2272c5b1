"""The 3-D ``dp x cp x tp`` mesh (strategy fsdp+tp with ``context_parallel_size``), on CPU.

Ring attention needs CUDA (``scripts/cp_cpu_probe.py``), so the whole 3-D step with a real
attention is in the GPU set (``tests/gpu/test_gpu_context_parallel_3d.py``). Here:

- the mesh's shape (``dp x cp x tp``, see ``mesh.mesh_dims`` for why not HF's
  ``dp x tp x cp``) and sub-meshes on 8 ranks (2 x 2 x 2), one rank at a time in this process
  over torch's fake process group (no communication, the real ``DeviceMesh`` rank layout):
  which ranks form each ``tp``, ``cp``, ``dp`` and flattened ``dp_cp`` group;
- the composition on 4 gloo ranks (``dp x cp x tp`` = 1 x 2 x 2): a per-token model with
  Llama-named projections (no attention mixing tokens, so the split is exact on CPU) goes
  through ``build_engine`` (Megatron TP plan on the ``tp`` sub-mesh, FSDP2 over ``dp_cp``)
  and ``cp_forward_backward`` (buffers sharded over ``cp``) with the loop's arithmetic and
  matches one process on the whole batch step for step; the 3-D checkpoint resumes on a
  plain dp = 4 DDP engine at exactly the next step. Then the real tiny Llama is built on the
  same mesh (Hugging Face modules under the TP plan and FSDP2) and one step on the whole
  batch, without the ring (every cp rank runs the whole sequence: ring attention needs
  CUDA), gives one process's loss and global gradient norm.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from trainer_core.parallel.config import ParallelConfig
from trainer_core.parallel.mesh import check_world, mesh_dims
from trainer_core.tasks.base import token_cross_entropy

VOCAB, HIDDEN, STEPS, ROWS, LENGTH, SAVED_AT, LR = 16, 8, 4, 4, 10, 2, 0.05
_3D = ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2, context_parallel_size=2)


def test_the_3d_dims_are_dp_tp_cp_and_need_whole_tp_x_cp_blocks() -> None:
    assert mesh_dims(_3D, 8, local_world=8) == [("dp", 2), ("cp", 2), ("tp", 2)]
    assert mesh_dims(_3D, 4, local_world=1) == [("dp", 1), ("cp", 2), ("tp", 2)]
    check_world(_3D, 8)
    with pytest.raises(ValueError, match=r"multiple of tensor_parallel_size x context_par"):
        check_world(_3D, 6)
    with pytest.raises(ValueError, match="set strategy: fsdp\\+tp"):
        check_world(
            ParallelConfig(strategy="tp", tensor_parallel_size=2, context_parallel_size=2), 4
        )


def test_the_3d_mesh_on_8_fake_ranks_names_each_sub_mesh() -> None:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from trainer_core.parallel.context import cp_meshes

    groups: dict[str, set[tuple[int, ...]]] = {
        "tp": set(),
        "cp": set(),
        "dp": set(),
        "dp_cp": set(),
    }
    for rank in range(8):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=8)
        try:
            meshes = cp_meshes("cpu", mesh_dims(_3D, 8, local_world=8))
            assert meshes.mesh.mesh_dim_names == ("dp", "cp", "tp")
            assert meshes.tp is not None
            parts = {"tp": meshes.tp, "cp": meshes.cp, "dp": meshes.dp, "dp_cp": meshes.dp_cp}
            for name, sub in parts.items():
                ranks = tuple(sub.mesh.flatten().tolist())
                assert rank in ranks and sub.mesh_dim_names == (name,)
                groups[name].add(ranks)
            assert meshes.dp.get_local_rank() == rank // 4  # which rows this rank reads
        finally:
            dist.destroy_process_group()
    # Rank r = 4 dp + 2 cp + tp: TP ranks adjacent (one node's fast links), cp strides 2.
    assert groups["tp"] == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert groups["cp"] == {(0, 2), (1, 3), (4, 6), (5, 7)}
    assert groups["dp"] == {(0, 4), (1, 5), (2, 6), (3, 7)}
    assert groups["dp_cp"] == {(0, 2, 4, 6), (1, 3, 5, 7)}  # FSDP / gradient groups


# ------------------------------------------------------- dp x cp x tp over 4 gloo ranks


class _Block(nn.Module):
    """Llama's projection names (the TP plan's targets) around a per-token mixing: column
    shards of q/k/v and gate/up combine elementwise, o/down reduce the row shards."""

    def __init__(self) -> None:
        super().__init__()
        self.self_attn = nn.Module()
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(self.self_attn, name, nn.Linear(HIDDEN, HIDDEN, bias=False))
        self.self_attn.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.mlp.up_proj = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)
        self.mlp.down_proj = nn.Linear(2 * HIDDEN, HIDDEN, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a = self.self_attn
        h = h + a.o_proj(torch.tanh(a.q_proj(h)) * a.k_proj(h) + a.v_proj(h))
        m = self.mlp
        return h + m.down_proj(torch.nn.functional.silu(m.gate_proj(h)) * m.up_proj(h))


class _TokenLlama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(_attn_implementation="sdpa")
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(LENGTH + 8, HIDDEN)
        self.layers = nn.ModuleList([_Block(), _Block()])
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, **_: Any) -> Any:
        h = self.tok(input_ids) + self.pos(position_ids)
        for block in self.layers:
            h = block(h)
        return SimpleNamespace(logits=self.head(h))


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.trainer_core.test_strategies_harness import TINY_LLAMA

    return LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, attn_implementation="sdpa"))


def _llama_reference() -> list[float]:
    """One process: the tiny Llama's loss and gradient norm on step 0's whole batch."""
    torch.manual_seed(0)
    model, b = _llama(), _global_batch(0)
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    summed, count, _ = token_cross_entropy(logits, b["labels"], shift=True)
    (summed / count).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    return [float(summed.detach() / count), float(norm)]


def _global_batch(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    start = torch.randint(0, VOCAB - 1, (ROWS, 1), generator=g)
    ids = (start + 3 * torch.arange(LENGTH)) % (VOCAB - 1) + 1  # learnable: next = this + 3
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # unequal lengths: the global target count decides the mean
    mask[3, 4:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = _TokenLlama()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        b = _global_batch(step)
        positions = torch.arange(LENGTH).expand(ROWS, LENGTH)
        summed, count, _ = token_cross_entropy(
            model(b["input_ids"], positions).logits, b["labels"], shift=True
        )
        (summed / count).backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(summed.detach() / count))
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _rows(full: dict[str, torch.Tensor], dp_rank: int, dp_size: int) -> dict[str, Any]:
    rows = ROWS // dp_size
    return {k: v[dp_rank * rows : (dp_rank + 1) * rows] for k, v in full.items()}


def dp_tp_cp_steps(rank: int, out: str) -> None:
    """On a 4-rank gloo group (``cp_gloo_spawn``): steps on dp x cp x tp = 1 x 2 x 2 (saving
    after step SAVED_AT - 1), then a dp = 4 DDP engine loads that checkpoint and runs the
    steps after it."""
    from torch.distributed.tensor import DTensor

    from trainer_core.parallel import build_engine
    from trainer_core.parallel.context import cp_forward_backward

    def engine_for(cfg: ParallelConfig, make: Any = _TokenLlama) -> Any:
        torch.manual_seed(0)
        return build_engine(
            make(),
            cfg,
            make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=LR),
            device=torch.device("cpu"),
        )

    def summed_loss(output: Any, labels: torch.Tensor) -> torch.Tensor:
        return token_cross_entropy(output.logits, labels, shift=False)[0]

    engine = engine_for(_3D)
    assert (engine.dp_size, engine.cp_size) == (1, 2)
    q = engine.unwrapped.layers[0].self_attn.q_proj.weight
    # FSDP's shard over dp_cp composed with TP's column shard: one 2-D spmd mesh.
    assert isinstance(q, DTensor) and q.device_mesh.mesh_dim_names == ("dp_cp", "tp")
    losses = []
    for step in range(STEPS):
        mine = _rows(_global_batch(step), engine.dp_rank, engine.dp_size)
        # The loop's arithmetic (trainer_core.train_step.train_step).
        count = torch.tensor(float(int((mine["labels"][:, 1:] != -100).sum())))
        global_count = (engine.reduce_sum(count) / engine.cp_size).clamp_(min=1.0)
        scale = engine.dp_size * engine.cp_size / global_count
        summed = cp_forward_backward(engine, mine, scale, summed_loss)
        engine.clip_and_step(None)
        losses.append(float(engine.reduce_sum(summed.detach()) / global_count))
        if step == SAVED_AT - 1:
            engine.save(Path(out).parent / "ckpt")
    state = {k: v.tolist() for k, v in engine.full_state_dict().items()}
    ddp = engine_for(ParallelConfig(strategy="ddp"))
    ddp.load(Path(out).parent / "ckpt")
    resumed = []
    for step in range(SAVED_AT, STEPS):
        mine = _rows(_global_batch(step), ddp.dp_rank, ddp.dp_size)
        count = torch.tensor(float(int((mine["labels"][:, 1:] != -100).sum())))
        global_count = ddp.reduce_sum(count).clamp_(min=1.0)
        positions = torch.arange(LENGTH).expand(len(mine["labels"]), LENGTH)
        logits = ddp.forward(input_ids=mine["input_ids"], position_ids=positions).logits
        summed, _, _ = token_cross_entropy(logits, mine["labels"], shift=True)
        ddp.backward(summed * ddp.dp_size / global_count)
        ddp.clip_and_step(None)
        resumed.append(float(ddp.reduce_sum(summed.detach()) / global_count))
    # The real tiny Llama's plan on the same 3-D mesh: one step on the whole batch,
    # every cp rank running the whole sequence (the ring itself needs CUDA).
    llama = engine_for(_3D, _llama)
    attn = llama.unwrapped.model.layers[0].self_attn
    assert isinstance(attn.k_proj.weight, DTensor) and isinstance(attn.o_proj.weight, DTensor)
    b = _global_batch(0)
    logits = llama.forward(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    summed, count, _ = token_cross_entropy(logits, b["labels"], shift=True)
    llama.backward(summed / count)
    llama_step = [float(summed.detach() / count), float(llama.clip_and_step(None))]
    if rank == 0:
        result = {"losses": losses, "state": state, "resumed": resumed, "llama": llama_step}
        Path(out).write_text(json.dumps(result))


@pytest.mark.slow  # 4 spawned processes, shared with test_context_parallel
def test_dp_tp_cp_on_gloo_equals_one_process_and_resumes_on_dp4(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from tests.trainer_core.cp_gloo_spawn import gloo_results

    got = gloo_results(tmp_path_factory, "3d")
    want_losses, want_state = _reference()
    assert want_losses[-1] < want_losses[0]  # it learns
    assert got["losses"] == pytest.approx(want_losses, abs=1e-5)
    assert set(got["state"]) == set(want_state)
    for key, value in want_state.items():
        torch.testing.assert_close(torch.tensor(got["state"][key]), value, atol=1e-5, rtol=1e-5)
    # The 3-D checkpoint (TP/FSDP shards, Adam moments) continues on dp = 4 at the next step.
    assert got["resumed"] == pytest.approx(want_losses[SAVED_AT:], abs=1e-5)
    # The Llama plan on the tp sub-mesh, FSDP over dp_cp: loss and global grad norm.
    assert got["llama"] == pytest.approx(_llama_reference(), abs=1e-5)
