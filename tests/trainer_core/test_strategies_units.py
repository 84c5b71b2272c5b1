"""Fast checks of the parallel package's pure parts: config rules, block discovery and
gradient clipping (no process group needed)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import (
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

from trainer_core.parallel import ParallelConfig, build_engine, init_distributed
from trainer_core.parallel.blocks import find_blocks
from trainer_core.parallel.grad_norm import clip_grad_norm
from trainer_core.parallel.mesh import check_world
from trainer_core.parallel.tp import _check_heads


@pytest.mark.parametrize(
    ("cfg", "world", "says"),
    [
        (ParallelConfig(strategy="tp", tensor_parallel_size=2), 4, None),  # 2 x 2 mesh
        (ParallelConfig(strategy="tp", tensor_parallel_size=4), 6, "multiple of"),
        (ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2), 2, "at least 2x it"),
        (ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2), 6, None),
        (ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=4), 6, "multiple of"),
        (
            ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2, fsdp_sharding="no_shard"),
            4,
            None,  # a 3-D mesh: replicate x 1 x tp
        ),
    ],
)
def test_world_size_rules(cfg: ParallelConfig, world: int, says: str | None) -> None:
    if says is None:
        check_world(cfg, world)
        return
    with pytest.raises(ValueError) as err:
        check_world(cfg, world)
    assert says in str(err.value)


def test_tp_size_must_divide_heads() -> None:
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64)  # fmt: skip
    model = LlamaForCausalLM(config)
    _check_heads(model, 2)
    with pytest.raises(
        ValueError, match="must divide num_attention_heads=4 and num_key_value_heads=2"
    ):
        _check_heads(model, 4)


def test_find_blocks_across_architectures() -> None:
    llama = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                         num_attention_heads=2, vocab_size=64))  # fmt: skip
    bert = BertModel(BertConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                num_attention_heads=2, vocab_size=64))  # fmt: skip
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=4, n_head=2, vocab_size=64))
    assert find_blocks(llama) == list(llama.model.layers)
    assert find_blocks(bert) == list(bert.encoder.layer)
    assert find_blocks(gpt2) == list(gpt2.transformer.h)
    assert find_blocks(nn.Linear(2, 2)) == []


def test_clip_grad_norm_matches_torch() -> None:
    torch.manual_seed(0)
    a, b = nn.Linear(8, 8), nn.Linear(8, 8)
    for m in (a, b):
        m(torch.randn(4, 8)).pow(2).sum().backward()
    b.load_state_dict(a.state_dict())
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert pa.grad is not None
        pb.grad = pa.grad.clone()
    want = torch.nn.utils.clip_grad_norm_(a.parameters(), 0.1)
    got = clip_grad_norm(list(b.parameters()), 0.1)
    assert got.dim() == 0
    torch.testing.assert_close(got, want)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pb.grad, pa.grad)
    # No max: the norm only, gradients untouched.
    before = [p.grad.clone() for p in b.parameters() if p.grad is not None]
    clip_grad_norm(list(b.parameters()), None)
    assert all(torch.equal(x, p.grad) for x, p in zip(before, b.parameters(), strict=True))


def test_single_process_engine_without_process_group() -> None:
    info = init_distributed(use_cuda=False)
    assert (info.rank, info.world_size, info.device.type) == (0, 1, "cpu")
    model = nn.Linear(4, 1)
    engine = build_engine(
        model,
        ParallelConfig(),
        make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        device=info.device,
    )
    assert (engine.dp_rank, engine.dp_size) == (0, 1)
    t = torch.tensor(3.0)
    assert engine.reduce_sum(t) is t
    assert set(engine.full_state_dict()) == {"weight", "bias"}


def test_fp16_on_cpu_is_refused() -> None:
    with pytest.raises(ValueError, match="use bf16 on CPU"):
        build_engine(nn.Linear(2, 2), ParallelConfig(fp16=True),
                     make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
                     device=torch.device("cpu"))  # fmt: skip


def test_merged_copy_equals_peft_merge_and_leaves_the_model_alone() -> None:
    import copy

    from peft import LoraConfig, get_peft_model

    from trainer_core.export import merged_copy

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64)  # fmt: skip
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(LlamaForCausalLM(config), lora)
    with torch.no_grad():  # B starts at zero; a trained adapter does not
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = merged_copy(model, {k: v.detach().clone() for k, v in model.state_dict().items()})
    want = copy.deepcopy(model).merge_and_unload()
    ids = torch.randint(0, 64, (2, 8))
    torch.testing.assert_close(merged(input_ids=ids).logits, want(input_ids=ids).logits)
    torch.testing.assert_close(merged(input_ids=ids).logits, model(input_ids=ids).logits)
    assert not any("lora" in k for k in merged.state_dict())
    q = "model.layers.0.self_attn.q_proj.weight"
    base_q = before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.allclose(merged.state_dict()[q], base_q)  # the delta went in
    for k, v in model.state_dict().items():  # the training model is untouched
        assert torch.equal(v, before[k]), k
