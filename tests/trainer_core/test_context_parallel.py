"""Context parallelism's CPU-testable parts (``trainer_core.parallel.context``).

torch 2.13's ring attention runs only on the CUDA SDPA kernels (``scripts/cp_cpu_probe.py``
shows the CPU kernel has no CP sharding rule), so the ring itself is in the GPU set
(``tests/gpu/test_gpu_context_parallel.py``). Here, on CPU:

- ``cp_batch``: labels shifted before the split, rows right-aligned and padded to a multiple
  of ``2 x cp``, explicit positions;
- the Hugging Face contract the CP step relies on: the tiny Llama's loss on the CP batch
  (unshifted loss) equals its usual shifted loss, and with a shard's non-contiguous
  positions and an all-ones mask SDPA is called with no ``attn_mask``, ``is_causal=True`` and
  equal Q/K/V head counts (no packed-sequence mask, no ``enable_gqa``);
- the mesh, buffer sharding, loss scaling and gradient reduction: 4 gloo ranks on a
  ``dp x cp`` = 2 x 2 mesh (DDP over ``dp_cp``) train a position-aware per-token model (no
  attention, so nothing needs CUDA) through ``build_engine`` and ``cp_forward_backward`` with
  the loop's scale, and match one process on the whole batch step for step; the dp x cp
  checkpoint then resumes on a plain dp = 4 DDP engine at exactly the next step.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trainer_core.parallel.context import _repeated_kv_heads, cp_batch, padded_length
from trainer_core.tasks.base import token_cross_entropy

VOCAB, STEPS, ROWS, LENGTH, SAVED_AT = 16, 4, 4, 10, 2


def _padded_batch() -> dict[str, torch.Tensor]:
    ids = torch.tensor([[5, 6, 7, 8, 9, 0], [3, 4, 5, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_padded_length_is_a_multiple_of_two_chunks_per_rank() -> None:
    assert [padded_length(n, 2) for n in (1, 4, 5, 8, 9)] == [4, 4, 8, 8, 12]
    assert padded_length(6, 3) == 6 and padded_length(7, 3) == 12


def test_cp_batch_shifts_labels_pads_and_adds_positions() -> None:
    out = cp_batch(_padded_batch(), cp=2)
    assert set(out) == {"input_ids", "labels", "position_ids"}
    assert out["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0, 0, 0], [3, 4, 5, 0, 0, 0, 0, 0]]
    assert out["labels"].tolist() == [
        [6, 7, 8, 9, -100, -100, -100, -100],
        [4, 5, -100, -100, -100, -100, -100, -100],
    ]
    assert out["position_ids"].tolist() == [list(range(8))] * 2


def test_cp_batch_right_aligns_left_padded_rows() -> None:
    ids = torch.tensor([[0, 0, 3, 4, 5]])
    mask = torch.tensor([[0, 0, 1, 1, 1]])
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    out = cp_batch(batch, cp=1)
    assert out["input_ids"].tolist() == [[3, 4, 5, 0, 0, 0]]
    assert out["labels"].tolist() == [[4, 5, -100, -100, -100, -100]]


def _tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.trainer_core.test_strategies_harness import TINY_LLAMA

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, attn_implementation="sdpa"))
    return model.eval()


def test_tiny_llama_loss_on_the_cp_batch_equals_its_shifted_loss() -> None:
    model, batch = _tiny_llama(), _padded_batch()
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        want, count, _ = token_cross_entropy(out.logits, batch["labels"], shift=True)
        cp = cp_batch(batch, cp=2)
        ones = torch.ones_like(cp["input_ids"])
        with _repeated_kv_heads():
            got_out = model(input_ids=cp["input_ids"], position_ids=cp["position_ids"],
                            attention_mask=ones)  # fmt: skip
        got, got_count, _ = token_cross_entropy(got_out.logits, cp["labels"], shift=False)
    assert int(count) == int(got_count) == 6
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_shards_positions_reach_sdpa_as_plain_causal_attention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch.nn.functional as F

    model, calls = _tiny_llama(), []
    real = F.scaled_dot_product_attention

    def record(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
        calls.append((q.shape[1], k.shape[1], v.shape[1], kw))
        return real(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", record)
    # Rank 0 of cp=2 on 8 tokens holds chunks 0 and 3: positions 0, 1, 6, 7 (not contiguous).
    positions = torch.tensor([[0, 1, 6, 7]])
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad(), _repeated_kv_heads():
        model(input_ids=ids, position_ids=positions, attention_mask=torch.ones_like(ids))
    assert len(calls) == 2  # one per decoder layer
    for heads_q, heads_k, heads_v, kw in calls:
        assert heads_q == heads_k == heads_v == 4
        assert kw.get("attn_mask") is None and kw.get("is_causal") is True
        assert not kw.get("enable_gqa", False)


# ---------------------------------------------------------- dp x cp over 4 gloo ranks


class _TokenModel(torch.nn.Module):
    """Per-token logits from the token and its position: no attention, so the sequence
    split is exact on CPU and any misplaced shard, label or position changes the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(_attn_implementation="sdpa")
        self.tok = torch.nn.Embedding(VOCAB, 8)
        self.pos = torch.nn.Embedding(LENGTH + 8, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, **_: Any) -> Any:
        return SimpleNamespace(
            logits=self.head(torch.tanh(self.tok(input_ids) + self.pos(position_ids)))
        )


def _global_batch(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(1, VOCAB, (ROWS, LENGTH), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # unequal lengths: the global target count decides the mean
    mask[3, 4:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _reference() -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = _TokenModel()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    losses = []
    for step in range(STEPS):
        b = _global_batch(step)
        positions = torch.arange(LENGTH).expand(ROWS, LENGTH)
        logits = model(b["input_ids"], positions).logits
        summed, count, _ = token_cross_entropy(logits, b["labels"], shift=True)
        (summed / count).backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(summed.detach() / count))
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _rank_rows(full: dict[str, torch.Tensor], dp_rank: int, dp_size: int) -> dict[str, Any]:
    rows = ROWS // dp_size
    return {k: v[dp_rank * rows : (dp_rank + 1) * rows] for k, v in full.items()}


def dp_by_cp_steps(rank: int, out: str) -> None:
    """On a 4-rank gloo group (``cp_gloo_spawn``): steps 0..STEPS-1 on dp x cp = 2 x 2,
    saving after step SAVED_AT - 1; then a plain DDP engine over the 4 ranks (dp = 4) loads
    that checkpoint and runs the steps after it."""
    from trainer_core.parallel import ParallelConfig, build_engine
    from trainer_core.parallel.context import cp_forward_backward

    def engine_for(cfg: ParallelConfig) -> Any:
        torch.manual_seed(0)
        return build_engine(
            _TokenModel(),
            cfg,
            make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=0.05),
            device=torch.device("cpu"),
        )

    def summed_loss(output: Any, labels: torch.Tensor) -> torch.Tensor:
        return token_cross_entropy(output.logits, labels, shift=False)[0]

    engine = engine_for(ParallelConfig(strategy="ddp", context_parallel_size=2))
    assert (engine.dp_size, engine.cp_size) == (2, 2)
    losses = []
    for step in range(STEPS):
        mine = _rank_rows(_global_batch(step), engine.dp_rank, engine.dp_size)
        # The loop's arithmetic (trainer_core.train_step.train_step).
        count = torch.tensor(float(int((mine["labels"][:, 1:] != -100).sum())))
        global_count = (engine.reduce_sum(count) / engine.cp_size).clamp_(min=1.0)
        scale = engine.dp_size * engine.cp_size / global_count
        summed = cp_forward_backward(engine, mine, scale, summed_loss)
        engine.clip_and_step(None)
        losses.append(float(engine.reduce_sum(summed.detach()) / global_count))
        if step == SAVED_AT - 1:
            engine.save(Path(out).parent / "ckpt")
    state = {k: v.tolist() for k, v in engine.unwrapped.state_dict().items()}
    ddp = engine_for(ParallelConfig(strategy="ddp"))
    ddp.load(Path(out).parent / "ckpt")
    resumed = []
    for step in range(SAVED_AT, STEPS):
        mine = _rank_rows(_global_batch(step), ddp.dp_rank, ddp.dp_size)
        count = torch.tensor(float(int((mine["labels"][:, 1:] != -100).sum())))
        global_count = ddp.reduce_sum(count).clamp_(min=1.0)
        positions = torch.arange(LENGTH).expand(len(mine["labels"]), LENGTH)
        logits = ddp.forward(input_ids=mine["input_ids"], position_ids=positions).logits
        summed, _, _ = token_cross_entropy(logits, mine["labels"], shift=True)
        ddp.backward(summed * ddp.dp_size / global_count)
        ddp.clip_and_step(None)
        resumed.append(float(ddp.reduce_sum(summed.detach()) / global_count))
    if rank == 0:
        Path(out).write_text(json.dumps({"losses": losses, "state": state, "resumed": resumed}))


@pytest.mark.slow  # 4 spawned processes, shared with test_context_parallel_3d
def test_dp_by_cp_on_gloo_equals_one_process_and_resumes_on_dp4(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from tests.trainer_core.cp_gloo_spawn import gloo_results

    got = gloo_results(tmp_path_factory, "2d")
    want_losses, want_state = _reference()
    assert want_losses[-1] < want_losses[0]  # it learns
    assert got["losses"] == pytest.approx(want_losses, abs=1e-5)
    for key, value in want_state.items():
        torch.testing.assert_close(torch.tensor(got["state"][key]), value, atol=1e-5, rtol=1e-5)
    # The dp x cp checkpoint (weights and Adam moments) continues on dp = 4 at the next step.
    assert got["resumed"] == pytest.approx(want_losses[SAVED_AT:], abs=1e-5)
