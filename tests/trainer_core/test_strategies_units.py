"""Fast checks of the parallel package's pure parts: config rules, the DeepSpeed config
builder, block discovery and gradient clipping (no process group needed)."""

from __future__ import annotations

from typing import Any

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
from trainer_core.parallel.build import _check_tp_world
from trainer_core.parallel.deepspeed_engine import deepspeed_config
from trainer_core.parallel.grad_norm import clip_grad_norm
from trainer_core.parallel.tp import _check_heads


def test_from_spec_defaults_follow_design() -> None:
    cfg = ParallelConfig.from_spec({}, {})
    assert cfg.strategy == "ddp"
    assert (cfg.fsdp_sharding, cfg.fsdp_cpu_offload) == ("full_shard", False)
    assert (cfg.deepspeed_stage, cfg.offload_optimizer, cfg.offload_param) == (2, False, False)
    assert (cfg.tensor_parallel_size, cfg.bf16, cfg.fp16) == (1, False, False)
    assert (cfg.max_grad_norm, cfg.micro_batch_size) == (1.0, 16)


def test_from_spec_reads_every_field() -> None:
    cfg = ParallelConfig.from_spec(
        {
            "strategy": "deepspeed",
            "fsdp": {"sharding": "hybrid_shard", "cpu_offload": True},
            "deepspeed": {"stage": 3, "offload_optimizer": True, "offload_param": True,
                          "config": {"zero_optimization": {"reduce_bucket_size": 1000}}},
        },
        {"bf16": True, "max_grad_norm": None, "per_device_train_batch_size": 4},
    )  # fmt: skip
    assert (cfg.strategy, cfg.fsdp_sharding, cfg.fsdp_cpu_offload) == (
        "deepspeed",
        "hybrid_shard",
        True,
    )
    assert (cfg.deepspeed_stage, cfg.offload_optimizer, cfg.offload_param) == (3, True, True)
    assert cfg.deepspeed_config == {"zero_optimization": {"reduce_bucket_size": 1000}}
    assert (cfg.bf16, cfg.max_grad_norm, cfg.micro_batch_size) == (True, None, 4)


@pytest.mark.parametrize(
    ("distributed", "training", "says"),
    [
        ({"strategy": "pp"}, {}, "distributed.strategy"),
        ({"fsdp": {"sharding": "zero"}}, {}, "distributed.fsdp.sharding"),
        ({"fsdp": {"shard": "full_shard"}}, {}, "unknown key(s) ['shard']"),
        ({"deepspeed": {"stage": 4}}, {}, "use 0, 1, 2 or 3"),
        ({"deepspeed": {"stage": 2, "offload_param": True}}, {}, "offload_param needs stage 3"),
        ({"deepspeed": {"stage": 0, "offload_optimizer": True}}, {}, "needs stage >= 1"),
        ({"strategy": "tp"}, {}, "tensor_parallel_size >= 2"),
        ({"strategy": "fsdp", "tensor_parallel_size": 2}, {}, "needs strategy 'tp' or 'fsdp+tp'"),
        ({}, {"bf16": True, "fp16": True}, "set at most one"),
        ({"tensor_parallel_size": 0}, {}, "must be >= 1"),
        ({"fsdp": {"hybrid_shard_size": 2}}, {}, "only for sharding: hybrid_shard"),
        ({"mesh": [2]}, {}, "unknown key(s) ['mesh']"),
    ],
)
def test_config_errors_say_what_to_change(
    distributed: dict[str, Any], training: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValueError) as err:
        ParallelConfig.from_spec(distributed, training)
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("cfg", "world", "says"),
    [
        (ParallelConfig(strategy="tp", tensor_parallel_size=2), 4, "use strategy 'fsdp+tp'"),
        (ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2), 2, "at least 2x it"),
        (ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2), 6, None),
        (ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=4), 6, "multiple of"),
        (
            ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2, fsdp_sharding="no_shard"),
            4,
            "full_shard or shard_grad_op",
        ),
    ],
)
def test_world_size_rules(cfg: ParallelConfig, world: int, says: str | None) -> None:
    if says is None:
        _check_tp_world(cfg, world)
        return
    with pytest.raises(ValueError) as err:
        _check_tp_world(cfg, world)
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


def test_deepspeed_config_built_from_fields_and_merged() -> None:
    cfg = ParallelConfig(
        strategy="deepspeed",
        deepspeed_stage=3,
        offload_optimizer=True,
        offload_param=True,
        bf16=True,
        max_grad_norm=0.5,
        micro_batch_size=4,
        deepspeed_config={"zero_optimization": {"stage3_prefetch_bucket_size": 10}},
    )
    built = deepspeed_config(cfg, world_size=2, cuda=False)
    assert built["train_micro_batch_size_per_gpu"] == 4
    assert built["train_batch_size"] == 8
    assert built["gradient_accumulation_steps"] == 1
    assert built["gradient_clipping"] == 0.5
    assert built["bf16"] == {"enabled": True} and built["fp16"] == {"enabled": False}
    zero = built["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_prefetch_bucket_size"] == 10  # merged, not replaced
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": False}


def test_deepspeed_config_refuses_its_own_accumulation() -> None:
    cfg = ParallelConfig(strategy="deepspeed", deepspeed_config={"gradient_accumulation_steps": 4})
    with pytest.raises(ValueError, match=r"use training\.gradient_accumulation_steps"):
        deepspeed_config(cfg, world_size=1, cuda=False)


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
