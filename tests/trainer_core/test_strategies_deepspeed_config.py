"""The DeepSpeed config builder: ours + the user's pass-through + ``"auto"`` filled from the
spec as Hugging Face's integration does. Pure: no torch.distributed, no DeepSpeed import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from shunter.jobspec.deepspeed import DeepSpeedConfigError, deepspeed_config
from trainer_core.parallel import ParallelConfig, TrainingValues


@dataclass(frozen=True)
class _Training:  # the fields TrainingValues.from_training reads
    gradient_accumulation_steps: int = 2
    learning_rate: float = 3e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_epsilon: float = 1e-6
    weight_decay: float = 0.1
    optim: str = "adamw_torch"
    lr_scheduler_type: str = "linear"
    warmup_steps: int = 0
    warmup_ratio: float = 0.1


def _values(total_steps: int | None = 100, **over: Any) -> TrainingValues:
    return TrainingValues.from_training(_Training(**over), total_steps=total_steps)


def _cfg(user: dict[str, Any] | None = None, **over: Any) -> ParallelConfig:
    base: dict[str, Any] = {"strategy": "deepspeed", "deepspeed_stage": 2, "micro_batch_size": 4}
    return ParallelConfig(**{**base, **over}, deepspeed_config=user)


HF_STYLE_ZERO3: dict[str, Any] = {  # the shape of HF's documented ds_config_zero3.json
    "fp16": {"enabled": "auto"},
    "bf16": {"enabled": "auto"},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "total_num_steps": "auto",
        },
    },
    "zero_optimization": {
        "stage": 3,
        "overlap_comm": True,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_gather_16bit_weights_on_model_save": True,
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}


def test_built_from_fields_without_user_config() -> None:
    cfg = _cfg(deepspeed_stage=3, offload_optimizer=True, offload_param=True, bf16=True,
               max_grad_norm=0.5)  # fmt: skip
    built = deepspeed_config(cfg, world_size=2, cuda=False, training=_values())
    assert built["train_micro_batch_size_per_gpu"] == 4
    assert built["gradient_accumulation_steps"] == 2
    assert built["train_batch_size"] == 4 * 2 * 2  # micro x accumulation x world
    assert built["gradient_clipping"] == 0.5
    assert built["bf16"] == {"enabled": True} and built["fp16"] == {"enabled": False}
    zero = built["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": False}
    assert "optimizer" not in built and "scheduler" not in built


def test_hf_style_auto_config_is_filled_from_the_spec() -> None:
    built = deepspeed_config(
        _cfg(HF_STYLE_ZERO3, deepspeed_stage=3),
        world_size=2,
        cuda=False,
        training=_values(),
        hidden_size=32,
    )
    assert built["train_micro_batch_size_per_gpu"] == 4
    assert built["gradient_accumulation_steps"] == 2
    assert built["train_batch_size"] == 16
    assert built["gradient_clipping"] == 1.0
    assert built["fp16"] == {"enabled": False} and built["bf16"] == {"enabled": False}
    zero = built["zero_optimization"]
    assert zero["reduce_bucket_size"] == 32 * 32
    assert zero["stage3_prefetch_bucket_size"] == int(0.9 * 32 * 32)
    assert zero["stage3_param_persistence_threshold"] == 320
    assert zero["overlap_comm"] is True  # the user's own keys are kept
    # Realised by the torch optimizer and scheduler the spec names: never built by DeepSpeed.
    assert "optimizer" not in built and "scheduler" not in built
    assert "auto" not in repr(built)


def test_user_values_merge_over_ours() -> None:
    user = {"zero_optimization": {"stage3_prefetch_bucket_size": 10}, "gradient_clipping": 1.0}
    built = deepspeed_config(_cfg(user, deepspeed_stage=3), world_size=1, cuda=False)
    zero = built["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_prefetch_bucket_size"] == 10


def test_matching_explicit_values_are_accepted() -> None:
    adamw = {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95]}}
    user = {"train_batch_size": 16, "gradient_accumulation_steps": 2, "optimizer": adamw}
    built = deepspeed_config(_cfg(user), world_size=2, cuda=False, training=_values())
    assert built["train_batch_size"] == 16


@pytest.mark.parametrize(
    ("user", "says"),
    [
        ({"gradient_accumulation_steps": 4}, "gradient_accumulation_steps is 4 but the spec"),
        ({"train_batch_size": 8}, "train_batch_size is 8 but the spec implies 16"),
        ({"zero_optimization": {"stage": True}}, "zero_optimization.stage is True"),
        ({"bf16": {"enabled": 1}}, "bf16.enabled is 1 but the spec implies False"),
        ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}, "optimizer.params.lr is 0.001"),
        ({"optimizer": {"type": "Lamb", "params": {}}}, "optimizer.type 'Lamb' is not"),
        ({"optimizer": {"type": "AdamW", "params": {"amsgrad": True}}}, "no training.* equivalent"),
        ({"scheduler": {"type": "WarmupLR", "params": {}}}, "use 'WarmupDecayLR'"),
        ({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 7}}},
         "total_num_steps is 7 but the spec implies 100"),
        ({"zero_optimization": {"reduce_bucket_size": "auto"}}, "reduce_bucket_size is 'auto'"),
        ({"some_new_knob": "auto"}, "some_new_knob is 'auto' but nothing fills it"),
    ],
)  # fmt: skip
def test_contradictions_name_the_key_and_the_fix(user: dict[str, Any], says: str) -> None:
    with pytest.raises(DeepSpeedConfigError) as err:
        deepspeed_config(_cfg(user), world_size=2, cuda=False, training=_values())
    assert says in str(err.value)
    assert "distributed.deepspeed.config." in str(err.value)
    assert "'auto'" in str(err.value)  # the fix


def test_every_mismatch_is_listed_at_once() -> None:
    user = {"gradient_accumulation_steps": 3, "train_micro_batch_size_per_gpu": 1}
    with pytest.raises(DeepSpeedConfigError) as err:
        deepspeed_config(_cfg(user), world_size=2, cuda=False, training=_values())
    assert "gradient_accumulation_steps" in str(err.value)
    assert "train_micro_batch_size_per_gpu" in str(err.value)


def test_warmup_from_ratio_needs_the_total() -> None:
    sched = {"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}}
    # 10% of 100 steps = 10: agrees.
    deepspeed_config(_cfg(sched), world_size=2, cuda=False, training=_values(100))
    with pytest.raises(DeepSpeedConfigError, match="warmup_num_steps is 10 but the spec implies 5"):
        deepspeed_config(_cfg(sched), world_size=2, cuda=False, training=_values(50))
    # Total unknown (epochs): the block is still realised by the spec's schedule.
    deepspeed_config(_cfg(sched), world_size=2, cuda=False, training=_values(None))


def test_hf_style_config_under_epochs_builds() -> None:
    # total_num_steps unknown before the data is sharded: the spec's schedule fills the block.
    built = deepspeed_config(
        _cfg(HF_STYLE_ZERO3, deepspeed_stage=3),
        world_size=2,
        cuda=False,
        training=_values(None),
        hidden_size=32,
    )
    assert built["gradient_accumulation_steps"] == 2 and "scheduler" not in built
