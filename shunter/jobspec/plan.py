"""The plan of a job, from its spec alone: layout, batch sizes, steps and memory per device.

``plan_for(spec, ...)`` is pure arithmetic. Facts the spec does not hold come in as
arguments, ``None`` when unknown: ``param_count`` / ``trainable_count`` (counted from the
model's config, ``shunter.jobspec.spec_counts``), ``train_rows`` (rows of a local train file,
``service.jobs.plan_facts``) and ``gpu_memory_bytes`` (the server setting
``SHUNTER_GPU_MEMORY_BYTES``). Offline (``shunter validate``) the layout and batch sizes are
known, and the counts when the config is at hand (from_scratch overrides, a local folder).

Layout mirrors ``trainer_core.parallel.build._meshes``: one mesh ``dp_replicate x dp_shard x
tp`` (ddp and deepspeed: a flat ``dp`` group of every rank; ddp with pipeline stages:
``dp x pp``, data-parallel size ``num_workers / pipeline_parallel_size``; context parallel:
``dp x cp``, data-parallel size ``num_workers / context_parallel_size``, FSDP sharded over
``dp x cp`` ranks; with fsdp+tp ``dp x cp x tp``, ``dp = num_workers / (cp x tp)``, states
divided by ``dp x cp`` (FSDP) and ``tp``). Activations are not in the memory estimate; their
driver, the tokens of a micro-batch one device holds, is ``sequence_tokens_per_device``
(divided by ``cp``).

Memory is **model states only**: parameters, gradients and optimizer states resident per
device. Activations, the temporary all-gathered layers of ZeRO-3 / FSDP, communication buckets
and the CUDA context are not included. Per device, with P parameters and T trainable ones
(T = P without adapters; under LoRA/PEFT only adapters have gradients and optimizer states)::

    params    = P * b_param / (s_param * tp)
    grads     = T * b_grad  / (s_grad  * tp)
    optimizer = T * b_optim / (s_optim * tp)

Bytes per parameter:

- DeepSpeed with fp16, or bf16 under ``mixed_precision: params`` (the ZeRO paper's
  accounting, which DeepSpeed's ``estimate_zero2_model_states_mem_needs`` /
  ``estimate_zero3_model_states_mem_needs`` follow): half-precision params 2 B and grads
  2 B; the optimizer keeps an fp32 master copy plus its states in fp32: 4 + 4 * states
  (Adam: 12 B). DeepSpeed's own estimators add ~2 B per parameter of fp32 gradient buffers
  (``18 * P / N``) and, for ZeRO-3, the largest layer gathered; neither is counted here.
- Without mixed precision, for DeepSpeed bf16 under ``mixed_precision: autocast``, and for
  trainer_core's own engines (ddp, fsdp, tp, fsdp+tp), which keep parameters in
  ``model.dtype`` and autocast the compute (FSDP2's ``params`` policy casts a gathered copy;
  the sharded parameter stays in ``model.dtype``): params and grads ``b = sizeof(dtype)``
  (4 B for float32), optimizer ``states * b`` (Adam: 8 B), no master copy.
- Optimizer states: adamw 2, lion 1, sgd 0 (no momentum), adafactor 0 (its factored second
  moment is O(rows + cols) per matrix, negligible, noted).
- Memory-saving optimizers (issue #29): when the model's layout is known, the optimizer part
  is ``optimizer_state_bytes`` (``shunter.jobspec.optim_bytes``, tensor by tensor: 8-bit
  states of bitsandbytes/torchao, GaLore's projected states and projectors; measured equal
  on CPU) divided by the shard; otherwise per trainable parameter: adamw_8bit,
  paged_adamw_8bit and adamw_torch_8bit 2 B, adamw_torch_4bit 1 B (block scales and the
  fp32 states of tensors under 4096 elements not counted), GaLore unknown (its states depend
  on the projected shapes).
- Quantized base (``model.quantization``, QLoRA): the parameters are
  ``quantized_param_bytes`` when the layout is known (4-bit: 0.5 B per linear weight plus
  block absmax; 8-bit: 1 B plus a scale per row; embeddings, norms, biases and the output
  embedding in ``model.dtype``), else every parameter at 4-bit 0.5 B + 1/16 B (absmax per
  64) or 8-bit 1 B.

Shard divisors ``s`` (N = data-parallel ranks of the shard group):

- ddp, deepspeed stage 0, fsdp ``no_shard``: 1, 1, 1 (replicated);
- deepspeed stage 1: optimizer / N; stage 2: grads and optimizer / N; stage 3: all / N;
- fsdp ``full_shard``: all / N; ``shard_grad_op``: grads and optimizer / N, params counted
  whole (they stay gathered between forward and backward, as in ZeRO-2);
  ``hybrid_shard``: all / shard-group size (unknown when ``hybrid_shard_size`` is unset: the
  ranks of one node, known only at placement; then counted as a group of 1, the worst case);
- tp: everything / tp (approximate: embeddings and norms are not split by the TP plan).

Offload: DeepSpeed ``offload_optimizer`` moves gradients and optimizer states to the CPU (as
in DeepSpeed's estimators), ``offload_param`` the parameters; FSDP ``cpu_offload`` all three.
Offloaded parts count 0 bytes on the device.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from shunter.jobspec.elastic import accumulation_at, at_width
from shunter.jobspec.spec import JobSpec

__all__ = ["MEMORY_BASIS", "MemoryEstimate", "Plan", "plan_for"]

MEMORY_BASIS = "model states only (params, grads, optimizer); no activations or buffers"
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_OPTIMIZER_STATES = {"adamw_torch": 2, "adamw_torch_fused": 2, "lion": 1, "sgd": 0, "adafactor": 0}
# Bytes per trainable parameter of the quantized-state optimizers, whatever model.dtype.
_LOW_BIT_BYTES = {
    "adamw_8bit": 2,
    "paged_adamw_8bit": 2,
    "adamw_torch_8bit": 2,
    "adamw_torch_4bit": 1,
}
# Tasks whose rows the packing collator regroups into max_length blocks of tokens.
_PACKED_TASKS = frozenset({"causal-lm", "chat-sft"})


class MemoryEstimate(BaseModel):
    """Bytes per device for the model states; a part is null when the counts are unknown."""

    # Unknown keys are ignored: a client reads a newer server's plan without failing.
    model_config = ConfigDict(extra="ignore")

    params_bytes: int | None = Field(description="parameters resident on one device")
    grads_bytes: int | None = Field(description="gradients resident on one device")
    optimizer_bytes: int | None = Field(description="optimizer states (and fp32 master copy)")
    total_bytes: int | None = Field(description="the sum; null when any part is unknown")
    bytes_per_param: dict[str, int] = Field(
        description="before sharding: param, grad, optimizer (per trainable param)"
    )
    shard: dict[str, int | None] = Field(
        description="divisor per part (ranks sharing it), tp included; null = unknown"
    )
    basis: str = Field(MEMORY_BASIS, description="what the estimate counts")


class Plan(BaseModel):
    """How a job would run: layout, batch sizes, steps, parameter counts, memory per device."""

    model_config = ConfigDict(extra="ignore")

    strategy: str
    world_size: int = Field(description="training processes (one per GPU)")
    mesh: dict[str, int | None] = Field(description="device-mesh dims, outer to inner")
    data_parallel_size: int = Field(description="ranks that see different data")
    tensor_parallel_size: int
    context_parallel_size: int = Field(1, description="ranks splitting each sequence")
    per_device_batch_size: int
    sequence_tokens_per_device: int = Field(
        0,
        description="tokens of one micro-batch whose activations a device holds: "
        "per_device_train_batch_size x data.max_length / context_parallel_size",
    )
    global_batch_size: int = Field(description="per-device x data-parallel ranks")
    accumulated_batch_size: int = Field(description="global x gradient_accumulation_steps")
    gradient_accumulation_steps: int
    train_rows: int | None = Field(description="rows of the train data; null = unknown")
    steps_per_epoch: int | None = Field(description="optimizer steps per epoch; null = unknown")
    total_steps: int | None = Field(description="optimizer steps of the whole run")
    steps_exact: bool = Field(description="false when steps come from an approximation")
    param_count: int | None
    trainable_param_count: int | None
    memory: MemoryEstimate
    gpu_memory_bytes: int | None = Field(description="one GPU's memory, from the server setting")
    fits: bool | None = Field(description="total <= gpu_memory_bytes; null = unknown or CPU")
    notes: list[str] = Field(default_factory=list)


def plan_for(
    spec: JobSpec,
    *,
    param_count: int | None = None,
    trainable_count: int | None = None,
    train_rows: int | None = None,
    gpu_memory_bytes: int | None = None,
    optimizer_state_bytes: int | None = None,
    quantized_param_bytes: int | None = None,
) -> Plan:
    """The plan of ``spec`` given the facts known about it (see the module docstring).

    ``optimizer_state_bytes`` / ``quantized_param_bytes``: one replica's optimizer states and
    quantized parameters from the model's layout (``shunter.jobspec.optim_bytes``)."""
    notes: list[str] = []
    if spec.resources.elastic:  # the narrowest width holds the most per GPU (FSDP shards)
        notes.append(
            f"elastic: planned at min, {spec.resources.min_workers} workers "
            f"(gradient_accumulation_steps {accumulation_at(spec, spec.resources.min_workers)})"
        )
        spec = at_width(spec, spec.resources.min_workers)
    d, t, r = spec.distributed, spec.training, spec.resources
    world = r.min_workers
    tp = d.tensor_parallel_size if d.strategy in ("tp", "fsdp+tp") else 1
    pp = d.pipeline_parallel_size  # > 1 under ddp only: a dp x pp mesh
    cp = d.context_parallel_size  # > 1 under ddp / fsdp (dp x cp), fsdp+tp (dp x cp x tp)
    dp = max(1, world // (tp * pp * cp))
    mesh, shard_group = _mesh(spec, dp=dp, tp=tp, notes=notes)
    tokens = t.per_device_train_batch_size * spec.data.max_length // cp
    if cp > 1:  # FSDP shards over the flattened dp x cp mesh (trainer_core.parallel.context)
        mesh, shard_group = {"dp": dp, "cp": cp}, dp * cp
        states = "whole on every rank"
        if d.strategy == "fsdp+tp":
            mesh = {"dp": dp, "cp": cp, "tp": tp}
            states = f"sharded over dp x cp ({dp * cp} ranks) x tp ({tp})"
        elif d.strategy == "fsdp":
            states = "sharded over dp x cp"
        notes.append(
            f"context parallel: each rank holds activations for 1/{cp} of every sequence "
            f"({tokens} tokens per micro-batch instead of {tokens * cp}); model states are "
            f"{states}"
        )
    if pp > 1:
        mesh, shard_group = {"dp": dp, "pp": pp}, dp
        notes.append(
            "pipeline: model states are counted for the whole model on every rank, an upper "
            f"bound (a stage holds 1/{pp} of the decoder layers, the first also the embedding, "
            "the last the final norm and LM head)"
        )
    global_batch = t.per_device_train_batch_size * dp
    steps_per_epoch, total, exact = _steps(spec, dp=dp, train_rows=train_rows, notes=notes)
    adapters = spec.model.lora is not None or spec.model.peft is not None
    if trainable_count is None and not adapters:
        trainable_count = param_count
    memory = _memory(
        spec,
        param_count=param_count,
        trainable_count=trainable_count,
        dp=dp,
        tp=tp,
        shard_group=shard_group,
        notes=notes,
        optimizer_state_bytes=optimizer_state_bytes,
        quantized_param_bytes=quantized_param_bytes,
    )
    fits = None
    if r.gpus_per_worker == 0:
        notes.append("CPU job: fits is not assessed")
    elif gpu_memory_bytes is not None and memory.total_bytes is not None:
        fits = memory.total_bytes <= gpu_memory_bytes
    return Plan(
        strategy=d.strategy,
        world_size=world,
        mesh=mesh,
        data_parallel_size=dp,
        tensor_parallel_size=tp,
        context_parallel_size=cp,
        per_device_batch_size=t.per_device_train_batch_size,
        sequence_tokens_per_device=tokens,
        global_batch_size=global_batch,
        accumulated_batch_size=global_batch * t.gradient_accumulation_steps,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        train_rows=train_rows,
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        steps_exact=exact,
        param_count=param_count,
        trainable_param_count=trainable_count,
        memory=memory,
        gpu_memory_bytes=None if r.gpus_per_worker == 0 else gpu_memory_bytes,
        fits=fits,
        notes=notes,
    )


def _mesh(
    spec: JobSpec, *, dp: int, tp: int, notes: list[str]
) -> tuple[dict[str, int | None], int | None]:
    """(mesh dims, FSDP shard-group size or None when unknown), as ``_meshes`` builds them."""
    d = spec.distributed
    if d.strategy in ("ddp", "deepspeed"):
        return {"dp": dp}, dp
    if d.strategy == "tp":
        return ({"dp_replicate": dp, "dp_shard": 1, "tp": tp} if dp > 1 else {"tp": tp}), 1
    sharding = d.fsdp.sharding
    mesh: dict[str, int | None]
    shard: int | None
    if sharding == "no_shard":
        mesh, shard = {"dp_replicate": dp, "dp_shard": 1}, 1
    elif sharding == "hybrid_shard":
        shard = d.fsdp.hybrid_shard_size
        if shard is None:
            notes.append(
                "hybrid_shard without hybrid_shard_size: the shard group is one node's ranks, "
                "known only at placement; memory counts a group of 1 (the worst case)"
            )
        mesh = {"dp_replicate": dp // shard if shard else None, "dp_shard": shard}
    else:
        mesh, shard = {"dp_shard": dp}, dp
    if tp > 1:
        mesh["tp"] = tp
    return mesh, shard


def _steps(
    spec: JobSpec, *, dp: int, train_rows: int | None, notes: list[str]
) -> tuple[int | None, int | None, bool]:
    """(steps per epoch, total steps, exact), as ``trainer_core.loop`` counts them."""
    t = spec.training
    packed = spec.data.packing and spec.model.task in _PACKED_TASKS
    max_steps = t.max_steps if t.max_steps > 0 else None
    per_epoch = None
    if packed:
        notes.append(
            "packing: rows are regrouped into max_length token blocks, so steps per epoch "
            "are known only after tokenizing"
        )
    elif train_rows is not None and train_rows >= dp:
        # Each rank takes rows // dp examples (the remainder is dropped) in batches.
        batches = -(-(train_rows // dp) // t.per_device_train_batch_size)
        per_epoch = -(-batches // t.gradient_accumulation_steps)
        total = max_steps or math.ceil(t.num_train_epochs * batches / t.gradient_accumulation_steps)
        return per_epoch, total, True
    return per_epoch, max_steps, not packed or max_steps is not None


def _memory(
    spec: JobSpec,
    *,
    param_count: int | None,
    trainable_count: int | None,
    dp: int,
    tp: int,
    shard_group: int | None,
    notes: list[str],
    optimizer_state_bytes: int | None = None,
    quantized_param_bytes: int | None = None,
) -> MemoryEstimate:
    d, t = spec.distributed, spec.training
    states = _OPTIMIZER_STATES.get(t.optim, 2)
    if t.optim == "adafactor":
        notes.append("adafactor: its factored optimizer state is not counted")
    if t.optim.startswith("galore_") and optimizer_state_bytes is None:
        notes.append(
            f"{t.optim}: its projected optimizer states need the model's layout; unknown here"
        )
    if d.strategy == "deepspeed" and (
        t.fp16 or (t.bf16 and d.deepspeed.mixed_precision == "params")
    ):
        b_param, b_grad, b_optim = 2, 2, 4 + 4 * states
    else:
        b = _DTYPE_BYTES[spec.model.dtype]
        b_param, b_grad, b_optim = b, b, _LOW_BIT_BYTES.get(t.optim, states * b)
        if spec.model.lora is not None or spec.model.peft is not None:
            # PEFT keeps adapter weights in float32 whatever the base's dtype
            # (get_peft_model's autocast_adapter_dtype): their grads and states are fp32 too.
            b_grad, b_optim = 4, _LOW_BIT_BYTES.get(t.optim, states * 4)
    s_param, s_grad, s_optim = 1, 1, 1
    off_param = off_grad = off_optim = False
    if d.strategy == "deepspeed":
        stage, ds = d.deepspeed.stage, d.deepspeed
        s_optim = dp if stage >= 1 else 1
        s_grad = dp if stage >= 2 else 1
        s_param = dp if stage >= 3 else 1
        off_grad = off_optim = ds.offload_optimizer
        off_param = ds.offload_param
    elif d.strategy in ("fsdp", "fsdp+tp"):
        group = shard_group or 1
        s_grad = s_optim = group
        s_param = 1 if d.fsdp.sharding == "shard_grad_op" else group
        off_param = off_grad = off_optim = d.fsdp.cpu_offload
    if tp > 1:
        notes.append("tp: all parameters counted as split tp ways (embeddings and norms are not)")
    if off_param or off_grad or off_optim:
        notes.append("offloaded parts are in CPU memory and count 0 bytes on the device")

    def part(count: int | None, nbytes: int, shard: int, offloaded: bool) -> int | None:
        if offloaded:
            return 0
        return None if count is None else -(-count * nbytes // (shard * tp))

    params = part(param_count, b_param, s_param, off_param)
    adapter_extra = 0  # fp32 adapter weights beyond b_param each (see b_grad above)
    if b_grad == 4 and b_param < 4 and trainable_count is not None:
        adapter_extra = trainable_count * (4 - b_param)
        if params is not None:
            params += -(-adapter_extra // (s_param * tp))
    quant = spec.model.quantization
    if quant is not None and not off_param:
        if quantized_param_bytes is None and param_count is not None:
            per = 0.5 + 4 / 64 if quant.bits == 4 else 1.0
            quantized_param_bytes = math.ceil(param_count * per)
            notes.append("quantized base: every parameter counted quantized (layout unknown)")
        # The base (quantized_param_bytes) plus the fp32 adapters trained on it.
        adapters = None if trainable_count is None else 4 * trainable_count
        params = (
            None
            if quantized_param_bytes is None or adapters is None
            else -(-(quantized_param_bytes + adapters) // (s_param * tp))
        )
    grads = part(trainable_count, b_grad, s_grad, off_grad)
    optim = part(trainable_count, b_optim, s_optim, off_optim)
    if optimizer_state_bytes is not None and not off_optim:
        optim = -(-optimizer_state_bytes // (s_optim * tp))
    elif t.optim.startswith("galore_"):
        optim = None
    parts = (params, grads, optim)
    known_group = shard_group is not None or d.strategy not in ("fsdp", "fsdp+tp")
    return MemoryEstimate(
        params_bytes=params,
        grads_bytes=grads,
        optimizer_bytes=optim,
        total_bytes=None if any(p is None for p in parts) else sum(p or 0 for p in parts),
        bytes_per_param={"param": b_param, "grad": b_grad, "optimizer": b_optim},
        shard={
            "param": s_param * tp if known_group else None,
            "grad": s_grad * tp if known_group else None,
            "optimizer": s_optim * tp if known_group else None,
        },
    )
