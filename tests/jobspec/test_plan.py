"""``plan_for``: mesh, batch sizes, steps and the model-states memory estimate per strategy."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from shunter.jobspec import validate
from shunter.jobspec.plan import plan_for
from shunter.jobspec.spec import JobSpec

P = 1_000_000  # parameters of the pretend model


def spec(**parts: dict[str, Any]) -> JobSpec:
    raw: dict[str, Any] = {
        "name": "plan",
        "model": {"name_or_path": "m", "task": "causal-lm"},
        "data": {"train": "train.jsonl"},
        "resources": {"num_workers": 8, "gpus_per_worker": 1},
    }
    for key, value in parts.items():
        raw[key] = {**raw.get(key, {}), **value}
    return validate(raw)


def total(s: JobSpec, **kw: Any) -> int:
    mem = plan_for(s, param_count=P, **kw).memory
    assert mem.total_bytes is not None
    return mem.total_bytes


def ds(stage: int, **extra: Any) -> JobSpec:
    return spec(
        distributed={"strategy": "deepspeed", "deepspeed": {"stage": stage, **extra}},
        training={"bf16": True},
    )


def test_ddp_replicates_fp32_adam_16_bytes_per_param() -> None:
    plan = plan_for(spec(), param_count=P)
    assert plan.mesh == {"dp": 8} and plan.world_size == 8 and plan.data_parallel_size == 8
    m = plan.memory
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes) == (4 * P, 4 * P, 8 * P)
    assert m.total_bytes == 16 * P


def test_zero_stages_shard_more_and_more() -> None:
    n = 8
    z = [plan_for(ds(stage), param_count=P).memory for stage in (0, 1, 2, 3)]
    # Mixed precision under DeepSpeed: 2 B params, 2 B grads, 12 B fp32 master + Adam.
    assert (z[0].params_bytes, z[0].grads_bytes, z[0].optimizer_bytes) == (2 * P, 2 * P, 12 * P)
    assert (z[1].params_bytes, z[1].grads_bytes, z[1].optimizer_bytes) == (
        2 * P,
        2 * P,
        12 * P // n,
    )
    assert (z[2].params_bytes, z[2].grads_bytes, z[2].optimizer_bytes) == (
        2 * P,
        2 * P // n,
        12 * P // n,
    )
    assert z[3].total_bytes == 16 * P // n
    totals = [m.total_bytes for m in z]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
    assert total(ds(3)) < total(spec())


def test_zero_bf16_autocast_keeps_fp32_params_and_no_master_copy() -> None:
    # mixed_precision autocast: DeepSpeed's torch_autocast, parameters stay fp32.
    m = plan_for(ds(1, mixed_precision="autocast"), param_count=P).memory
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes) == (4 * P, 4 * P, 8 * P // 8)


def test_zero_offload_moves_parts_off_the_device() -> None:
    zero2 = plan_for(ds(2, offload_optimizer=True), param_count=P).memory
    assert (zero2.grads_bytes, zero2.optimizer_bytes, zero2.params_bytes) == (0, 0, 2 * P)
    zero3 = plan_for(ds(3, offload_optimizer=True, offload_param=True), param_count=P).memory
    assert zero3.total_bytes == 0


def test_fp32_deepspeed_has_no_master_copy() -> None:
    s = spec(distributed={"strategy": "deepspeed", "deepspeed": {"stage": 3}})
    assert plan_for(s, param_count=P).memory.total_bytes == 16 * P // 8


@pytest.mark.parametrize(
    ("sharding", "size", "mesh", "divisor"),
    [
        ("full_shard", None, {"dp_shard": 8}, (8, 8, 8)),
        ("shard_grad_op", None, {"dp_shard": 8}, (1, 8, 8)),
        ("hybrid_shard", 4, {"dp_replicate": 2, "dp_shard": 4}, (4, 4, 4)),
        ("no_shard", None, {"dp_replicate": 8, "dp_shard": 1}, (1, 1, 1)),
    ],
)
def test_fsdp_shardings(
    sharding: str, size: int | None, mesh: dict[str, int], divisor: tuple[int, int, int]
) -> None:
    fsdp: dict[str, Any] = {"sharding": sharding}
    if size is not None:
        fsdp["hybrid_shard_size"] = size
    plan = plan_for(spec(distributed={"strategy": "fsdp", "fsdp": fsdp}), param_count=P)
    assert plan.mesh == mesh
    m = plan.memory
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes) == (
        4 * P // divisor[0],
        4 * P // divisor[1],
        8 * P // divisor[2],
    )


def test_hybrid_without_size_is_unknown_and_counted_as_worst_case() -> None:
    s = spec(distributed={"strategy": "fsdp", "fsdp": {"sharding": "hybrid_shard"}})
    plan = plan_for(s, param_count=P)
    assert plan.mesh == {"dp_replicate": None, "dp_shard": None}
    assert plan.memory.total_bytes == 16 * P and plan.memory.shard["param"] is None
    assert any("hybrid_shard_size" in n for n in plan.notes)


def test_tensor_parallel_mesh_and_division() -> None:
    s = spec(
        model={"config_overrides": {"model_type": "llama"}},
        distributed={"strategy": "tp", "tensor_parallel_size": 4},
        training={"per_device_train_batch_size": 8},
    )
    plan = plan_for(s, param_count=P)
    assert plan.mesh == {"dp_replicate": 2, "dp_shard": 1, "tp": 4}
    assert plan.data_parallel_size == 2 and plan.global_batch_size == 2 * 8
    assert plan.memory.total_bytes == 16 * P // 4
    both = spec(
        model={"config_overrides": {"model_type": "llama"}},
        distributed={"strategy": "fsdp+tp", "tensor_parallel_size": 2},
    )
    plan = plan_for(both, param_count=P)
    assert plan.mesh == {"dp_shard": 4, "tp": 2}
    assert plan.memory.total_bytes == 16 * P // 8


def test_lora_only_trainable_params_have_grads_and_optimizer() -> None:
    s = spec(model={"lora": {"r": 8}})
    plan = plan_for(s, param_count=P, trainable_count=P // 100)
    m = plan.memory
    assert (m.params_bytes, m.grads_bytes, m.optimizer_bytes) == (4 * P, 4 * P // 100, 8 * P // 100)
    unknown = plan_for(s, param_count=P)
    assert unknown.trainable_param_count is None and unknown.memory.total_bytes is None
    assert unknown.memory.params_bytes == 4 * P


def test_batch_sizes_and_steps() -> None:
    training = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3}
    s = spec(training={**training, "num_train_epochs": 2.0})
    plan = plan_for(s, train_rows=1000)
    assert (plan.per_device_batch_size, plan.global_batch_size) == (4, 32)
    assert plan.accumulated_batch_size == 96
    # 1000 // 8 = 125 rows per rank -> 32 batches -> ceil(32 / 3) = 11 optimizer steps.
    assert plan.steps_per_epoch == 11 and plan.total_steps == 22 and plan.steps_exact
    unknown = plan_for(s)
    assert unknown.steps_per_epoch is None and unknown.total_steps is None


def test_max_steps_wins_and_packing_is_flagged() -> None:
    s = spec(training={"max_steps": 50})
    assert plan_for(s, train_rows=10_000).total_steps == 50
    packed = plan_for(spec(data={"packing": True}), train_rows=10_000)
    assert packed.steps_per_epoch is None and packed.total_steps is None
    assert not packed.steps_exact and any("packing" in n for n in packed.notes)


def test_fits_against_gpu_memory() -> None:
    s = spec()
    assert plan_for(s, param_count=P, gpu_memory_bytes=16 * P).fits is True
    assert plan_for(s, param_count=P, gpu_memory_bytes=16 * P - 1).fits is False
    assert plan_for(s, param_count=P).fits is None
    assert plan_for(s, gpu_memory_bytes=16 * P).fits is None
    cpu = spec(resources={"gpus_per_worker": 0})
    assert plan_for(cpu, param_count=P, gpu_memory_bytes=16 * P).fits is None


def test_plan_module_loads_no_heavy_package() -> None:
    code = (
        "import sys, shunter.jobspec.plan\n"
        "bad = {'torch', 'transformers', 'ray', 'fastapi', 'sqlalchemy'} & set(sys.modules)\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
