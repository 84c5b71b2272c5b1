"""Rules for the memory-saving optimizers, LoRA+ and quantized bases (issue #29).

``optimizer_errors(spec)`` is one entry of ``shunter.jobspec.rules._CHECKS``: each violated
rule is a ``FieldError`` on the field to change, with what would work. Where each optimizer
runs (the table in ``docs/parallel.md``):

- GaLore (``galore_*``) projects whole weight matrices, so it needs every rank to hold whole
  gradients: strategy ``ddp`` only. FSDP and TP hand the optimizer sharded DTensors, and
  DeepSpeed's ZeRO flattens the parameters into 1-D partitions (stage 0 keeps them whole but
  runs its own step bookkeeping, not tested here): refused. It trains full weights, so not
  with an adapter; ``optim_target_modules`` is required (HF raises without it).
- bitsandbytes' ``adamw_8bit`` and torchao's ``adamw_torch_8bit`` / ``adamw_torch_4bit``
  keep quantized states per whole tensor: strategy ``ddp`` (tested exact resume on CPU).
  bitsandbytes >= 0.48 has a CPU backend for its 8-bit optimizers; ``paged_adamw_8bit``
  pages states between GPU and host memory, which needs CUDA: refused on CPU workers.
- ``optim_args`` keys are GaLore's; with another optimizer they are refused by name.
- ``loraplus_lr_ratio`` needs ``model.lora`` (it scales the LoRA B matrices' rate).
- ``model.quantization`` (QLoRA): needs ``model.lora`` (a quantized base is frozen), GPU
  workers (bitsandbytes' 4/8-bit matmuls), strategy ``ddp`` and a pretrained base; 8-bit has
  no ``quant_type`` or ``double_quant``; the final model is the adapter (``merge_on_save``
  into a de-quantized base is not implemented: refused).
"""

from __future__ import annotations

from collections.abc import Iterator

from shunter.jobspec.errors import FieldError
from shunter.jobspec.spec import GALORE_OPTIMIZERS, JobSpec

__all__ = ["LOW_BIT_OPTIMIZERS", "optimizer_errors"]

# Optimizers whose states are quantized per whole tensor (bitsandbytes, torchao).
LOW_BIT_OPTIMIZERS = frozenset(
    {"adamw_8bit", "paged_adamw_8bit", "adamw_torch_8bit", "adamw_torch_4bit"}
)
_OPTIM = "training.optim"


def optimizer_errors(spec: JobSpec) -> Iterator[FieldError]:
    yield from _galore(spec)
    yield from _low_bit(spec)
    yield from _loraplus(spec)
    yield from _quantization(spec)


def _strategy_name(spec: JobSpec) -> str:
    d = spec.distributed
    if d.strategy == "deepspeed":
        return f"deepspeed (ZeRO-{d.deepspeed.stage})"
    return d.strategy


def _galore(spec: JobSpec) -> Iterator[FieldError]:
    t = spec.training
    if t.optim not in GALORE_OPTIMIZERS:
        if t.optim_target_modules is not None:
            yield FieldError(
                "training.optim_target_modules",
                f"only for the galore_* optimizers, not {t.optim!r}; remove it",
            )
        if t.optim_args is not None:
            for key, value in t.optim_args.model_dump().items():
                if value is not None:
                    yield FieldError(
                        f"training.optim_args.{key}",
                        f"a GaLore key: only for the galore_* optimizers, not {t.optim!r}; "
                        "remove it",
                    )
        return
    if spec.distributed.strategy != "ddp":
        yield FieldError(
            _OPTIM,
            f"{t.optim} projects whole weight matrices and cannot run under "
            f"{_strategy_name(spec)} (sharded or flattened parameters); use distributed."
            "strategy ddp, or adamw_torch_8bit / adamw_8bit to shrink the optimizer states",
        )
    if t.optim_target_modules is None:
        yield FieldError(
            "training.optim_target_modules",
            f"{t.optim} needs the modules to project, e.g. [attn, mlp] or 'all-linear'",
        )
    if spec.model.lora is not None or spec.model.peft is not None:
        yield FieldError(
            _OPTIM,
            f"{t.optim} trains full weights; with an adapter use adamw_torch or adamw_8bit, "
            "or remove model.lora / model.peft",
        )


def _low_bit(spec: JobSpec) -> Iterator[FieldError]:
    t = spec.training
    if t.optim == "paged_adamw_8bit" and spec.resources.gpus_per_worker == 0:
        yield FieldError(
            _OPTIM,
            "paged_adamw_8bit pages optimizer states between GPU and host memory (CUDA); on "
            "CPU workers use adamw_8bit (bitsandbytes' CPU backend) or adamw_torch_8bit",
        )
    if t.optim in LOW_BIT_OPTIMIZERS and spec.distributed.strategy != "ddp":
        yield FieldError(
            _OPTIM,
            f"{t.optim} quantizes each whole parameter's states and is supported with "
            f"distributed.strategy ddp, not {_strategy_name(spec)}; use ddp, or adamw_torch "
            "with this strategy",
        )


def _loraplus(spec: JobSpec) -> Iterator[FieldError]:
    if spec.training.loraplus_lr_ratio is not None and spec.model.lora is None:
        yield FieldError(
            "training.loraplus_lr_ratio",
            "LoRA+ scales the LoRA B matrices' learning rate: set model.lora, or remove it",
        )


def _quantization(spec: JobSpec) -> Iterator[FieldError]:
    q = spec.model.quantization
    if q is None:
        return
    where = "model.quantization"
    if spec.model.lora is None:
        yield FieldError(
            where,
            "a quantized base is frozen: train LoRA adapters on it (set model.lora), "
            "which is QLoRA",
        )
    if spec.resources.gpus_per_worker == 0:
        yield FieldError(
            where,
            "needs GPUs (bitsandbytes' 4/8-bit layers): set resources.gpus_per_worker >= 1, "
            "or remove model.quantization and train LoRA on a float32/bfloat16 base",
        )
    if spec.distributed.strategy != "ddp":
        yield FieldError(
            where, f"QLoRA runs with distributed.strategy ddp, not {_strategy_name(spec)}"
        )
    if spec.model.from_scratch:
        yield FieldError(where, "quantizes pretrained weights: not with from_scratch")
    if q.bits == 8:
        if q.quant_type is not None:
            yield FieldError(f"{where}.quant_type", "4-bit only; remove it for bits 8")
        if q.double_quant:
            yield FieldError(f"{where}.double_quant", "4-bit only; set false for bits 8")
