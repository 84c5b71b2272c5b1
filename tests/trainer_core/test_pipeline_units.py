"""Pipeline stages without a process group: the cut, the stage forward, the loss, refusals."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.trainer_core.test_strategies_harness import TINY_LLAMA
from trainer_core.parallel import ParallelConfig
from trainer_core.parallel.pipeline import (
    StageModule,
    build_pipeline,
    causal_lm_loss,
    stage_layers,
    window_tensors,
)
from trainer_core.parallel.pipeline import _check_model as check_model
from trainer_core.parallel.pipeline import _free_other_stages as free_other_stages


def _model(**overrides: object) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, "num_hidden_layers": 4, **overrides}))


def test_stage_layers_are_equal_consecutive_shares() -> None:
    assert [list(stage_layers(4, 2, s)) for s in range(2)] == [[0, 1], [2, 3]]
    assert [list(stage_layers(4, 4, s)) for s in range(4)] == [[0], [1], [2], [3]]
    with pytest.raises(ValueError, match="must divide the model's 4 decoder layers"):
        stage_layers(4, 3, 0)


def test_stages_chained_give_the_full_models_logits_and_loss() -> None:
    model = _model()
    ids = torch.randint(
        0, TINY_LLAMA["vocab_size"], (3, 12), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        want = model(input_ids=ids, labels=ids)
        h = ids
        for s in range(2):
            h = StageModule(model, stage_layers(4, 2, s), first=s == 0, last=s == 1)(h)
    assert torch.allclose(h, want.logits, atol=1e-5)
    assert abs(causal_lm_loss(h, ids).item() - want.loss.item()) < 1e-5


def test_stage_keys_are_the_hf_names() -> None:
    model = _model()
    full = set(model.state_dict())
    parts = [
        set(StageModule(model, stage_layers(4, 2, s), first=s == 0, last=s == 1).state_dict())
        for s in range(2)
    ]
    assert parts[0] | parts[1] == full and not parts[0] & parts[1]
    assert "model.embed_tokens.weight" in parts[0] and "lm_head.weight" in parts[1]
    assert "model.layers.2.mlp.up_proj.weight" in parts[1]


def test_loss_ignores_masked_labels() -> None:
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[1, 2, 3, -100, -100], [4, 5, 6, 1, 2]])
    shifted, target = logits[:, :-1].reshape(-1, 7), labels[:, 1:].reshape(-1)
    keep = target != -100
    want = torch.nn.functional.cross_entropy(shifted[keep], target[keep])
    assert torch.allclose(causal_lm_loss(logits, labels), want)


def test_refuses_tied_embeddings_and_non_llama_models() -> None:
    assert check_model(_model()) == 4
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        check_model(_model(tie_word_embeddings=True))
    with pytest.raises(ValueError, match="not a Llama-family causal LM"):
        check_model(torch.nn.Linear(2, 2))


def test_build_refuses_fp16_and_tied_embeddings_before_any_collective() -> None:
    def make(m: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.AdamW(m.parameters())

    cpu = torch.device("cpu")
    with pytest.raises(ValueError, match="no fp16 grad scaler"):
        cfg = ParallelConfig(pipeline_parallel_size=2, fp16=True)
        build_pipeline(_model(), cfg, make_optimizer=make, device=cpu, autocast_dtype=None)
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        cfg = ParallelConfig(pipeline_parallel_size=2)
        model = _model(tie_word_embeddings=True)
        build_pipeline(model, cfg, make_optimizer=make, device=cpu, autocast_dtype=None)


def _collated(rows: list[list[int]], *, left: bool) -> dict[str, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        cols = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, cols], mask[i, cols] = torch.tensor(row), 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_window_tensors_align_rows_left_and_fill_the_window(left: bool) -> None:
    batches = [_collated([[5, 6, 7], [8]], left=left), _collated([[9, 10]], left=left)]
    ids, labels = window_tensors(batches, rows=4, length=5)
    assert ids.tolist() == [[5, 6, 7, 0, 0], [8, 0, 0, 0, 0], [9, 10, 0, 0, 0], [0] * 5]
    pad = -100
    assert labels.tolist() == [
        [5, 6, 7, pad, pad],
        [8, pad, pad, pad, pad],
        [9, 10, pad, pad, pad],
        [pad] * 5,  # the short window's missing row: no targets
    ]
    with pytest.raises(ValueError, match=r"fixed by the batch size and data\.max_length"):
        window_tensors(batches, rows=4, length=2)
    with pytest.raises(ValueError, match=r"fixed by the batch size and data\.max_length"):
        window_tensors(batches, rows=2, length=5)


def test_padding_after_the_tokens_leaves_the_labelled_logits_as_dynamic_padding_does() -> None:
    model = _model().eval()
    batch = _collated([[5, 6, 7, 9], [8, 11]], left=False)
    ids, labels = window_tensors([batch], rows=3, length=8)
    stage = StageModule(model, range(4), first=True, last=True)
    with torch.no_grad():
        want = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        got = stage(ids)
    for i, n in enumerate((4, 2)):
        torch.testing.assert_close(got[i, :n], want[i, :n], atol=1e-5, rtol=1e-5)
    assert labels[2].eq(-100).all()


def test_the_other_stages_weights_go_to_meta_and_this_stage_keeps_its_own() -> None:
    model = _model()
    stage = StageModule(model, range(2), first=True, last=False)
    free_other_stages(model, stage)
    meta = {n for n, p in model.named_parameters() if p.is_meta}
    assert not any(p.is_meta for p in stage.parameters())
    assert "lm_head.weight" in meta and "model.norm.weight" in meta
    assert {n.split(".")[2] for n in meta if n.startswith("model.layers.")} == {"2", "3"}
    assert not model.model.embed_tokens.weight.is_meta
