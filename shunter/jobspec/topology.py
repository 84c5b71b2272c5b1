"""Rules about how a job is laid out on the workers, from what trainer_core can actually run.

Each rule here is a case that once passed validation and then failed (or was silently
ignored) on the workers; the message names the field to change and how:

- ``resources.gpus_per_worker`` is 0 or 1: trainer_core runs one training process per GPU, so
  more GPUs means more ``num_workers`` (a worker with 2 GPUs would train on one of them).
- ``distributed.fsdp.*`` options need strategy fsdp / fsdp+tp, ``distributed.deepspeed.*``
  options need strategy deepspeed (under another strategy they would be ignored).
- ``hybrid_shard_size`` needs ``sharding: hybrid_shard`` and must divide the data-parallel
  ranks (``num_workers``, or ``num_workers / tensor_parallel_size`` under ``fsdp+tp``).
- Tensor parallelism has a plan for Llama-style decoders only (``TP_MODEL_TYPES``): a
  ``config_overrides.model_type`` outside it is rejected here; a local model's
  ``config.json`` and a hub id are checked by the service (pass 2) with ``tp_model_error``.
- Pipeline parallelism (``pipeline_parallel_size``) runs under strategy ddp only (a
  ``dp x pp`` mesh; no FSDP, DeepSpeed or TP stages), for full-weight causal-LM training of
  Llama-family models (stages are cut from ``model.layers``; no LoRA/PEFT wrapper, untied
  embeddings); it must divide ``num_workers`` and the decoder layers
  (``config_overrides.num_hidden_layers`` here, the model's config at start-up), 1F1B needs
  at least as many micro-batches as stages, and the micro-batches must divide the window's
  rows (batch x accumulation). Not with fp16 (no grad scaler across stages), evaluation
  (``data.eval``: no forward-only schedule is wired) or the issue-29 optimizers (GaLore,
  8/4-bit: not tested on stages).
- Context parallelism splits each sequence over ranks with torch's ``context_parallel``, whose
  ring attention needs CUDA SDPA kernels: refused on CPU workers (so the scheduler places it
  on GPU nodes only); each rank gets two chunks (load-balanced causal split), so
  ``2 x context_parallel_size`` must divide ``max_length``. The mesh is ``dp x cp`` under
  strategy ddp or fsdp (full_shard / shard_grad_op: sharded over the flattened dp x cp), so
  cp divides ``num_workers`` (each count of an elastic range), and ``dp x cp x tp`` under
  fsdp+tp (TP on tp, FSDP over dp x cp), so ``tp x cp`` divides it; not under strategy tp
  (no gradient reduction across cp ranks) or deepspeed. Causal-LM / chat-SFT of Llama-family
  models (SDPA attention, explicit ``position_ids``), no eval yet, no quantized base, no
  pipeline.
- fp16 mixed precision keeps float32 master weights: ``model.dtype: float16`` with
  ``training.fp16`` fails in the grad scaler ("Attempting to unscale FP16 gradients").
"""

from __future__ import annotations

from collections.abc import Iterator

from shunter.jobspec.errors import FieldError
from shunter.jobspec.spec import TP_STRATEGIES, JobSpec

__all__ = ["TP_MODEL_TYPES", "model_type_from_name", "topology_errors", "tp_model_error"]

# Hugging Face model_type values whose decoder blocks have the q/k/v/o_proj and
# gate/up/down_proj projections trainer_core.parallel.tp shards (Llama-style).
TP_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "olmo2"})
_FSDP_STRATEGIES = frozenset({"fsdp", "fsdp+tp"})
# torch's per-parameter optimizers: their state is a plain tensor per parameter, saved under
# the parameter's name by every stage (the low-bit and GaLore ones are not tested on stages).
_PIPELINE_OPTIMIZERS = frozenset({"adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "lion"})
# Families a hub id names, longest match first ("distilbert" before "bert"); a guess from the
# name alone, used only where the model's config.json is not at hand (hub models).
_NAMED_FAMILIES = (
    "mixtral", "mistral", "llama", "qwen3", "qwen2", "gemma2", "gemma", "olmo2",
    "distilbert", "roberta", "deberta", "bert", "gpt2", "gpt-neo", "bloom", "falcon", "phi",
)  # fmt: skip


def topology_errors(spec: JobSpec) -> Iterator[FieldError]:
    """Every layout rule the spec breaks (see the module docstring)."""
    yield from _one_gpu_per_worker(spec)
    yield from _fsdp_options(spec)
    yield from _deepspeed_options(spec)
    yield from _fp16_master_weights(spec)
    yield from _pipeline(spec)
    yield from _context_parallel(spec)
    model_type = spec.model.config_overrides.get("model_type")
    if isinstance(model_type, str):
        error = tp_model_error(spec, model_type, "model.config_overrides")
        if error is not None:
            yield error


def tp_model_error(spec: JobSpec, model_type: str, loc: str) -> FieldError | None:
    """An error if the spec asks for tensor parallelism on a family with no TP plan."""
    strategy = spec.distributed.strategy
    if strategy not in TP_STRATEGIES or model_type in TP_MODEL_TYPES:
        return None
    families = ", ".join(sorted(TP_MODEL_TYPES))
    return FieldError(
        loc,
        f"strategy {strategy!r} has a tensor-parallel plan only for Llama-style models "
        f"(model_type {families}); this model is {model_type!r}: use strategy fsdp or "
        "deepspeed to shard it",
    )


def model_type_from_name(name: str) -> str | None:
    """The model family a hub id names (``meta-llama/Llama-3.2-1B`` -> llama), else None."""
    lowered = name.lower()
    found = next((family for family in _NAMED_FAMILIES if family in lowered), None)
    return "gpt_neo" if found == "gpt-neo" else found


def _one_gpu_per_worker(spec: JobSpec) -> Iterator[FieldError]:
    r = spec.resources
    if r.gpus_per_worker > 1:
        yield FieldError(
            "resources.gpus_per_worker",
            f"one training process per GPU: set gpus_per_worker: 1 and num_workers: "
            f"{r.max_workers * r.gpus_per_worker} (num_workers x gpus_per_worker)",
        )


def _fsdp_options(spec: JobSpec) -> Iterator[FieldError]:
    d, fsdp = spec.distributed, spec.distributed.fsdp
    if d.strategy not in _FSDP_STRATEGIES:
        if fsdp.cpu_offload:
            yield FieldError(
                "distributed.fsdp.cpu_offload",
                f"only for strategy fsdp or fsdp+tp, not {d.strategy!r}"
                + (
                    "; DeepSpeed offloads with deepspeed.offload_optimizer / offload_param"
                    if d.strategy == "deepspeed"
                    else ""
                ),
            )
        if fsdp.hybrid_shard_size is not None:
            yield FieldError(
                "distributed.fsdp.hybrid_shard_size",
                f"only for strategy fsdp with sharding hybrid_shard, not {d.strategy!r}",
            )
        if fsdp.mixed_precision != "autocast":
            yield FieldError(
                "distributed.fsdp.mixed_precision",
                f"only for strategy fsdp or fsdp+tp, not {d.strategy!r}; remove it",
            )
        return
    if fsdp.mixed_precision == "params" and not (spec.training.bf16 or spec.training.fp16):
        yield FieldError(
            "distributed.fsdp.mixed_precision",
            "params casts parameters to bf16/fp16: set training.bf16 or training.fp16, "
            "or use autocast",
        )
    # fsdp+tp runs every sharding (a dp_replicate x dp_shard x tp mesh); its shard groups
    # are made of data-parallel ranks, num_workers / tensor_parallel_size of them.
    size, workers = fsdp.hybrid_shard_size, spec.resources.max_workers
    tp = d.tensor_parallel_size if d.strategy == "fsdp+tp" else 1
    if size is not None and fsdp.sharding != "hybrid_shard":
        yield FieldError(
            "distributed.fsdp.hybrid_shard_size",
            f"only with sharding hybrid_shard (sharding is {fsdp.sharding!r}); remove it",
        )
    elif size is not None and (workers // tp) % size != 0:
        what = "resources.num_workers" if tp == 1 else "num_workers / tensor_parallel_size"
        yield FieldError(
            "distributed.fsdp.hybrid_shard_size",
            f"must divide {what} ({workers // tp}); {size} does not",
        )


def _deepspeed_options(spec: JobSpec) -> Iterator[FieldError]:
    strategy, ds = spec.distributed.strategy, spec.distributed.deepspeed
    if strategy == "deepspeed":
        if ds.mixed_precision == "autocast" and not spec.training.bf16:
            yield FieldError(
                "distributed.deepspeed.mixed_precision",
                "autocast is DeepSpeed's bf16 torch_autocast: set training.bf16 (fp16 under "
                "DeepSpeed uses its own loss scaling: mixed_precision params)",
            )
        return
    if ds.mixed_precision != "params":
        yield FieldError(
            "distributed.deepspeed.mixed_precision",
            f"only for strategy deepspeed, not {strategy!r}; remove it",
        )
    fsdp_hint = "; FSDP offloads with distributed.fsdp.cpu_offload" if strategy == "fsdp" else ""
    for name, on in (
        ("offload_optimizer", ds.offload_optimizer),
        ("offload_param", ds.offload_param),
    ):
        if on:
            yield FieldError(
                f"distributed.deepspeed.{name}",
                f"only for strategy deepspeed, not {strategy!r}{fsdp_hint}",
            )
    if ds.config is not None:
        yield FieldError(
            "distributed.deepspeed.config",
            f"only for strategy deepspeed, not {strategy!r}; remove it or set strategy: deepspeed",
        )


def _fp16_master_weights(spec: JobSpec) -> Iterator[FieldError]:
    if spec.training.fp16 and spec.model.dtype == "float16":
        yield FieldError(
            "model.dtype",
            "fp16 mixed precision needs float32 parameters (the grad scaler cannot unscale "
            "float16 gradients); set model.dtype: float32",
        )


def _pipeline(spec: JobSpec) -> Iterator[FieldError]:
    d, workers = spec.distributed, spec.resources.max_workers
    pp = d.pipeline_parallel_size
    if pp == 1:
        if d.pipeline_microbatches is not None:
            yield FieldError(
                "distributed.pipeline_microbatches",
                "only with distributed.pipeline_parallel_size > 1; remove it",
            )
        if d.pipeline_schedule != "1f1b":
            yield FieldError(
                "distributed.pipeline_schedule",
                "only with distributed.pipeline_parallel_size > 1; remove it",
            )
        return
    field = "distributed.pipeline_parallel_size"
    if d.strategy != "ddp":
        yield FieldError(
            field,
            f"pipeline stages run under strategy ddp only (a dp x pp mesh), not "
            f"{d.strategy!r}; set strategy: ddp or pipeline_parallel_size: 1",
        )
    if d.context_parallel_size > 1:
        yield FieldError(field, "pipeline and context parallelism together are not supported")
    if workers % pp:
        yield FieldError(field, f"must divide resources.num_workers ({workers}); {pp} does not")
    if spec.model.task != "causal-lm":
        yield FieldError(
            field,
            f"pipeline stages are cut for causal-lm models only, not {spec.model.task!r}",
        )
    if spec.model.lora is not None or spec.model.peft is not None:
        yield FieldError(field, "pipeline stages train all weights; remove model.lora / model.peft")
    yield from _llama_family_only(spec, field, "pipeline stages are cut for")
    layers = spec.model.config_overrides.get("num_hidden_layers")
    if isinstance(layers, int) and not isinstance(layers, bool) and layers % pp:
        yield FieldError(
            field,
            f"must divide the decoder layers (model.config_overrides.num_hidden_layers = "
            f"{layers}); {pp} does not",
        )
    if spec.model.config_overrides.get("tie_word_embeddings") is True:
        yield FieldError(
            field,
            "tied input/output embeddings would sit in the first and the last stage; set "
            "model.config_overrides.tie_word_embeddings: false or pipeline_parallel_size: 1",
        )
    yield from _pipeline_training(spec, pp)


def _pipeline_training(spec: JobSpec, pp: int) -> Iterator[FieldError]:
    """What the pipelined training step runs with: micro-batches, precision, eval, optimizer."""
    d, t = spec.distributed, spec.training
    micro = d.pipeline_microbatches or t.gradient_accumulation_steps
    if d.pipeline_schedule == "1f1b" and micro < pp:
        yield FieldError(
            "distributed.pipeline_microbatches",
            f"1f1b needs at least pipeline_parallel_size ({pp}) micro-batches, got {micro} "
            "(null = training.gradient_accumulation_steps); raise it or use gpipe",
        )
    rows = t.per_device_train_batch_size * t.gradient_accumulation_steps
    if rows % micro:
        yield FieldError(
            "distributed.pipeline_microbatches",
            f"must divide the rows of a step per data-parallel rank (per_device_train_batch_size"
            f" x gradient_accumulation_steps = {rows}); {micro} does not",
        )
    field = "distributed.pipeline_parallel_size"
    if t.fp16:
        yield FieldError(
            "training.fp16",
            "no fp16 grad scaler across pipeline stages; use training.bf16 or "
            "pipeline_parallel_size: 1",
        )
    if spec.data.eval is not None:
        yield FieldError(
            "data.eval",
            "evaluation does not run through pipeline stages yet (no forward-only schedule); "
            "remove data.eval or use pipeline_parallel_size: 1",
        )
    if t.optim not in _PIPELINE_OPTIMIZERS:
        yield FieldError(
            "training.optim",
            f"{t.optim!r} is not tested on pipeline stages; use one of "
            f"{', '.join(sorted(_PIPELINE_OPTIMIZERS))} or {field}: 1",
        )


def _context_parallel(spec: JobSpec) -> Iterator[FieldError]:
    d, r = spec.distributed, spec.resources
    cp = d.context_parallel_size
    if cp == 1:
        return
    field = "distributed.context_parallel_size"
    if r.gpus_per_worker == 0:
        yield FieldError(
            field,
            "context parallelism needs CUDA (torch's context_parallel runs ring attention "
            "on the CUDA SDPA kernels only); set resources.gpus_per_worker: 1 or "
            "context_parallel_size: 1",
        )
    if spec.data.max_length % (2 * cp):
        yield FieldError(
            field,
            f"2 x context_parallel_size ({2 * cp}) must divide data.max_length "
            f"({spec.data.max_length}): each rank takes two equal chunks of every sequence",
        )
    if r.max_workers % cp:  # (an elastic range is checked at each of its counts)
        yield FieldError(
            field,
            f"must divide resources.num_workers ({r.max_workers}): the mesh is "
            f"num_workers / {cp} data-parallel ranks x {cp} context-parallel ranks",
        )
    elif d.strategy == "fsdp+tp" and r.max_workers % (cp * d.tensor_parallel_size):
        tp = d.tensor_parallel_size
        yield FieldError(
            field,
            f"tensor_parallel_size x context_parallel_size ({tp * cp}) must divide "
            f"resources.num_workers ({r.max_workers}): the mesh is dp x {cp} (cp) x {tp} (tp); "
            "pick sizes whose product divides num_workers",
        )
    yield from _context_parallel_strategy(spec, field)
    yield from _context_parallel_model(spec, field)


def _context_parallel_strategy(spec: JobSpec, field: str) -> Iterator[FieldError]:
    d = spec.distributed
    if d.strategy == "tp":
        yield FieldError(
            field,
            "with tensor parallelism, context parallelism runs under strategy fsdp+tp (the "
            "dp x cp x tp mesh: FSDP over the dp x cp ranks, TP on tp; strategy tp has no "
            "gradient reduction across the cp ranks); set strategy: fsdp+tp",
        )
    elif d.strategy not in ("ddp", "fsdp", "fsdp+tp"):
        yield FieldError(
            field,
            f"the context-parallel mesh runs under strategy ddp, fsdp or fsdp+tp, not "
            f"{d.strategy!r} (no DeepSpeed cp mesh); set strategy: ddp, fsdp or fsdp+tp",
        )
    elif d.strategy != "ddp" and d.fsdp.sharding not in ("full_shard", "shard_grad_op"):
        yield FieldError(
            "distributed.fsdp.sharding",
            f"FSDP shards over the flattened dp x cp mesh: {d.fsdp.sharding!r} is not "
            "supported with context_parallel_size > 1; use full_shard or shard_grad_op",
        )
    if spec.data.eval is not None:
        yield FieldError(
            "data.eval",
            "evaluation does not run on split sequences yet; remove data.eval or use "
            "context_parallel_size: 1",
        )


def _context_parallel_model(spec: JobSpec, field: str) -> Iterator[FieldError]:
    if spec.model.task not in ("causal-lm", "chat-sft"):
        yield FieldError(
            field, f"sequences are split for causal-lm / chat-sft only, not {spec.model.task!r}"
        )
    yield from _llama_family_only(spec, field, "ring attention replaces SDPA in")
    if spec.model.quantization is not None:
        yield FieldError(
            "model.quantization",
            "a quantized base is not tested with context parallelism; remove "
            "model.quantization or use context_parallel_size: 1",
        )


def _llama_family_only(spec: JobSpec, field: str, what: str) -> Iterator[FieldError]:
    """An error on ``field`` when ``config_overrides`` names a model type outside
    ``TP_MODEL_TYPES``: ``what`` (e.g. "pipeline stages are cut for") Llama-family models."""
    model_type = spec.model.config_overrides.get("model_type")
    if isinstance(model_type, str) and model_type not in TP_MODEL_TYPES:
        yield FieldError(
            field,
            f"{what} Llama-family models ({', '.join(sorted(TP_MODEL_TYPES))}), not {model_type!r}",
        )
