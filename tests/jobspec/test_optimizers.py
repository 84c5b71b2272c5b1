"""Issue #29 in the spec: the memory-saving optimizers, optim_args, LoRA+ and QLoRA.

Every bad combination is a 422 naming the field and what would work; the plan counts the
optimizer states tensor by tensor from the layout (checked against the measured bytes in
tests/trainer_core/test_optim_lowmem.py) and the quantized base's bytes.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from shunter.jobspec import SpecError, validate
from shunter.jobspec.model_layouts import layout
from shunter.jobspec.optim_bytes import optimizer_state_bytes, quantized_param_bytes
from shunter.jobspec.param_count import task_config
from shunter.jobspec.plan import plan_for
from shunter.jobspec.spec import JobSpec
from shunter.jobspec.spec_counts import spec_memory_facts

GALORE = {"optim": "galore_adamw", "optim_target_modules": ["attn", "mlp"]}
LLAMA = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def raw(**parts: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "opt",
        "model": {"name_or_path": "m", "task": "causal-lm"},
        "data": {"train": "train.jsonl"},
        "resources": {"num_workers": 2, "gpus_per_worker": 0},
    }
    for key, value in parts.items():
        spec[key] = {**spec.get(key, {}), **value}
    return spec


def errors(spec: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        validate(spec)
    return {e.loc: e.message for e in info.value.errors}


@pytest.mark.parametrize(
    "training",
    [
        {"optim": "adamw_8bit"},
        {"optim": "adamw_torch_8bit"},
        {"optim": "adamw_torch_4bit"},
        GALORE,
        {**GALORE, "optim": "galore_adamw_8bit", "optim_args": {"rank": 16, "scale": 1.0}},
        {
            "optim": "galore_adafactor",
            "optim_target_modules": "all-linear",
            "optim_args": {"update_proj_gap": 50, "proj_type": "reverse_std"},
        },
    ],
)
def test_cpu_ddp_accepts(training: dict[str, Any]) -> None:
    assert validate(raw(training=training)).training.optim == training["optim"]


def test_loraplus_with_lora_accepted() -> None:
    spec = validate(raw(model={"lora": {"r": 4}}, training={"loraplus_lr_ratio": 16.0}))
    assert spec.training.loraplus_lr_ratio == 16.0


@pytest.mark.parametrize(
    ("parts", "loc", "phrase"),
    [
        (
            {"training": GALORE, "distributed": {"strategy": "fsdp"}},
            "training.optim",
            "use distributed.strategy ddp",
        ),
        (
            {
                "training": GALORE,
                "distributed": {"strategy": "deepspeed", "deepspeed": {"stage": 3}},
            },
            "training.optim",
            "deepspeed (ZeRO-3)",
        ),
        ({"training": {"optim": "galore_adamw"}}, "training.optim_target_modules", "needs"),
        (
            {"training": GALORE, "model": {"lora": {"r": 4}}},
            "training.optim",
            "trains full weights",
        ),
        ({"training": {"optim": "paged_adamw_8bit"}}, "training.optim", "on CPU workers use"),
        (
            {"training": {"optim": "adamw_8bit"}, "distributed": {"strategy": "fsdp"}},
            "training.optim",
            "use ddp",
        ),
        (
            {"training": {"optim": "adamw_torch", "optim_args": {"rank": 8}}},
            "training.optim_args.rank",
            "only for the galore_* optimizers",
        ),
        (
            {"training": {"optim_target_modules": ["attn"]}},
            "training.optim_target_modules",
            "only for the galore_*",
        ),
        ({"training": {"loraplus_lr_ratio": 16.0}}, "training.loraplus_lr_ratio", "model.lora"),
        (
            {"model": {"lora": {}, "quantization": {"bits": 4}}},
            "model.quantization",
            "needs GPUs",
        ),
        (
            {
                "model": {"quantization": {"bits": 4}},
                "resources": {"gpus_per_worker": 1},
            },
            "model.quantization",
            "set model.lora",
        ),
        (
            {
                "model": {"lora": {}, "quantization": {"bits": 8, "quant_type": "nf4"}},
                "resources": {"gpus_per_worker": 1},
            },
            "model.quantization.quant_type",
            "4-bit only",
        ),
    ],
)
def test_refused_with_the_field_and_the_fix(parts: dict[str, Any], loc: str, phrase: str) -> None:
    got = errors(raw(**parts))
    assert loc in got, got
    assert phrase in got[loc]


def test_optim_args_keys_are_typed() -> None:
    got = errors(raw(training={**GALORE, "optim_args": {"rank": 8, "lr_mult": 2}}))
    assert any(loc.startswith("training.optim_args") for loc in got), got
    got = errors(raw(training={**GALORE, "optim_args": {"rank": "8"}}))
    assert "training.optim_args.rank" in got


def test_qlora_on_gpus_accepted() -> None:
    spec = validate(
        raw(
            model={"lora": {"r": 8}, "quantization": {"bits": 4, "double_quant": True}},
            resources={"gpus_per_worker": 1},
        )
    )
    assert spec.model.quantization is not None and spec.model.quantization.bits == 4
    # The merge goes into the de-quantized base (trainer_core.dequant; the GPU set runs it).
    merged = validate(
        raw(
            model={"lora": {"merge_on_save": True}, "quantization": {"bits": 4}},
            resources={"gpus_per_worker": 1},
        )
    )
    assert merged.model.lora is not None and merged.model.lora.merge_on_save


def _shape() -> Any:
    return layout(task_config(LLAMA, "causal-lm", None), "causal")


def _from_scratch(**training: Any) -> JobSpec:
    return validate(
        raw(
            model={
                "name_or_path": None,
                "from_scratch": True,
                "tokenizer": "tok",
                "config_overrides": LLAMA,
            },
            training=training,
        )
    )


def test_plan_counts_low_bit_and_galore_states() -> None:
    adamw = _from_scratch()
    facts = spec_memory_facts(adamw, local_config=None, vocab_size=None)
    assert facts["optimizer_state_bytes"] is not None
    full = plan_for(adamw, param_count=1, trainable_count=1, **facts).memory.optimizer_bytes
    for optim, bound in (
        ("adamw_8bit", 0.35),
        ("adamw_torch_8bit", 0.35),
        ("adamw_torch_4bit", 0.2),
    ):
        s = _from_scratch(optim=optim)
        got = plan_for(
            s, param_count=1, **spec_memory_facts(s, local_config=None, vocab_size=None)
        ).memory.optimizer_bytes
        assert full is not None and got is not None and got <= bound * full, optim
    g = _from_scratch(**GALORE, optim_args={"rank": 8})
    gf = spec_memory_facts(g, local_config=None, vocab_size=None)
    planned = plan_for(g, param_count=1, **gf).memory.optimizer_bytes
    assert planned == gf["optimizer_state_bytes"] and planned is not None and full is not None
    assert planned < full / 2
    # Without the layout GaLore is unknown, said so; 8-bit falls back to 2 B per parameter.
    unknown = plan_for(g, param_count=1000)
    assert unknown.memory.optimizer_bytes is None
    assert any("galore_adamw" in n for n in unknown.notes)
    assert (
        plan_for(_from_scratch(optim="adamw_8bit"), param_count=1000).memory.optimizer_bytes == 2000
    )


def test_plan_quantized_base() -> None:
    shape = _shape()
    spec = validate(
        raw(
            model={"lora": {}, "quantization": {"bits": 4}, "dtype": "bfloat16"},
            resources={"gpus_per_worker": 1},
        )
    )
    q = spec.model.quantization
    assert q is not None
    got = quantized_param_bytes(shape, q, 2)
    # 4-bit linears (+ an fp32 absmax per 64); the rest (embeddings, norms, the output head)
    # float32, as PEFT's prepare_model_for_kbit_training leaves them, whatever model.dtype.
    quantized = [
        x.fan_in * x.fan_out for x in shape.linears if not x.tied and x.name != shape.output
    ]
    want = sum(math.ceil(n / 2) + 4 * math.ceil(n / 64) for n in quantized)
    assert got == want + 4 * (shape.total - sum(quantized))
    # The plan adds the fp32 adapters (10 trainable parameters) to the quantized base.
    plan = plan_for(spec, param_count=shape.total, trainable_count=10, quantized_param_bytes=got)
    assert plan.memory.params_bytes == got + 4 * 10
    assert (plan.memory.grads_bytes, plan.memory.optimizer_bytes) == (4 * 10, 8 * 10)
    fallback = plan_for(spec, param_count=1000, trainable_count=10)
    assert fallback.memory.params_bytes == 563 + 40  # 0.5 + 1/16 B per parameter, fp32 adapters


def test_bytes_model_sums_per_tensor() -> None:
    t = validate(raw()).training
    shape = _shape()
    # AdamW: two fp32 states and a 4 B step per tensor.
    tensors = sum(1 + x.bias for x in shape.linears if not x.tied) + len(shape.tensors)
    assert optimizer_state_bytes(shape, t, 4) == 8 * shape.total + 4 * tensors
