"""A spec is data: the rules that keep a spec from choosing code, loaders or output paths.

Pure checks (stdlib + the jobspec models), run in pass 1 through ``rules.cross_field_errors``
and again in pass 2 once a local model's ``model_type`` is known:

- ``model.config_overrides`` may only set fields of the model's own ``PretrainedConfig``
  class (``model_config_keys.json``, generated from transformers by
  ``scripts/gen_model_config_keys.py``), with bounded values: scalars, short lists, flat
  mappings. Loader arguments (``trust_remote_code``, ``revision``, ``cache_dir``,
  ``device_map``, ``quantization_config``, ``attn_implementation``...) and private
  (``_``-prefixed) keys are refused for every model.
- ``distributed.deepspeed.config`` passes a nested allow-list of numerics keys. Sections that
  write files or talk to the network (tensorboard, wandb, csv_monitor, comet,
  flops_profiler, nvme offload paths, checkpoint dirs...) are refused. ``"auto"`` is accepted
  for every leaf.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from shunter.jobspec.errors import FieldError
from shunter.jobspec.spec import JobSpec

__all__ = [
    "DEEPSPEED_ALLOWED",
    "LOADER_ARGS",
    "config_override_errors",
    "deepspeed_config_errors",
    "model_config_keys",
    "safety_errors",
]

# Keyword arguments of from_pretrained / AutoConfig / the model loader, plus config keys that
# steer loading rather than describe the model. Refused whatever the model_type says.
LOADER_ARGS = frozenset(
    {
        "adapter_kwargs", "adapter_name", "attn_implementation", "auto_map", "cache_dir",
        "code_revision", "config", "custom_pipelines", "device_map", "device_mesh",
        "disable_mmap", "dtype", "force_download", "from_flax", "from_tf", "gguf_file",
        "key_mapping", "local_files_only", "low_cpu_mem_usage", "max_memory", "mirror",
        "name_or_path", "offload_buffers", "offload_folder", "offload_state_dict",
        "output_loading_info", "proxies", "pretrained_model_name_or_path",
        "quantization_config", "resume_download", "revision", "subfolder", "token",
        "tokenizer_class", "torch_dtype", "torchscript", "tp_plan", "tp_size",
        "transformers_version", "trust_remote_code", "use_auth_token", "use_safetensors",
        "variant", "weights_only",
    }
)  # fmt: skip
_MAX_STR = 256
_MAX_ITEMS = 256
_OVERRIDES = "model.config_overrides"


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    text = resources.files("shunter.jobspec").joinpath("model_config_keys.json").read_text("utf-8")
    table: dict[str, Any] = json.loads(text)
    return table


def model_config_keys(model_type: str | None) -> frozenset[str] | None:
    """Keys ``config_overrides`` may set for ``model_type``; ``None`` = an unknown type.

    ``model_type=None`` (a hub model whose config the service cannot read) gives the union
    over every known type: still only real config fields.
    """
    table = _table()
    common = set(table["common"])
    if model_type is None:
        return frozenset(common.union(*(v.split() for v in table["model_types"].values())))
    own = table["model_types"].get(model_type)
    if own is None:
        return None
    return frozenset(common | set(own.split()))


def safety_errors(spec: JobSpec) -> Iterator[FieldError]:
    """Pass-1 safety rules (the ``cross_field_errors`` hook)."""
    overrides = spec.model.config_overrides
    model_type = overrides.get("model_type") if spec.model.from_scratch else None
    yield from config_override_errors(
        overrides, model_type=model_type if isinstance(model_type, str) else None
    )
    yield from deepspeed_config_errors(spec.distributed.deepspeed.config)


def config_override_errors(
    overrides: Mapping[str, Any], *, model_type: str | None
) -> Iterator[FieldError]:
    """Every key of ``overrides`` not a bounded field of ``model_type``'s config class."""
    allowed = model_config_keys(model_type)
    if allowed is None:
        yield FieldError(
            f"{_OVERRIDES}.model_type",
            f"unknown model_type {model_type!r}; use one transformers knows (e.g. 'bert', 'gpt2')",
        )
        return
    for key, value in overrides.items():
        loc = f"{_OVERRIDES}.{key}"
        if key in LOADER_ARGS or key.startswith("_"):
            yield FieldError(
                loc,
                "is a loader argument, not a model-config field; config_overrides may only "
                "set fields of the model's config (e.g. hidden_dropout_prob, num_hidden_layers)",
            )
        elif key == "model_type":
            continue  # names the config class for from_scratch; checked above
        elif key not in allowed:
            what = f"model_type {model_type!r}" if model_type else "any known model config"
            yield FieldError(loc, f"is not a config field of {what}; remove it")
        elif (problem := _unbounded(value, depth=0)) is not None:
            yield FieldError(loc, problem)


def _unbounded(value: Any, *, depth: int) -> str | None:
    """Why ``value`` is not bounded data: scalars; lists of scalars; at the top, a flat
    mapping whose values are scalars or lists of scalars (``id2label``, ``rope_scaling``)."""
    if value is None or isinstance(value, bool | int | float):
        return None
    if isinstance(value, str):
        return None if len(value) <= _MAX_STR else f"strings are limited to {_MAX_STR} chars"
    if isinstance(value, list):
        if len(value) > _MAX_ITEMS:
            return f"lists are limited to {_MAX_ITEMS} items"
        if any(isinstance(item, list | dict) for item in value):
            return "list items must be scalars"
        return next((p for item in value if (p := _unbounded(item, depth=2))), None)
    if isinstance(value, dict) and depth == 0:
        if len(value) > _MAX_ITEMS:
            return f"mappings are limited to {_MAX_ITEMS} items"
        if any(isinstance(item, dict) for item in value.values()):
            return "a mapping's values must be scalars or lists of scalars"
        return next((p for item in value.values() if (p := _unbounded(item, depth=1))), None)
    return "must be a scalar, a short list or a flat mapping"


# ---------------------------------------------------------------- DeepSpeed allow-list

_LEAF = None  # a scalar (or "auto") is allowed here
_PAIR = "pair"  # a scalar or a list of up to 8 scalars (Adam's betas)
_OFFLOAD_KEYS = ("device", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu", "ratio")
DEEPSPEED_ALLOWED: dict[str, Any] = {
    **dict.fromkeys(
        (
            "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
            "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "memory_breakdown",
            "prescale_gradients", "gradient_predivide_factor", "communication_data_type",
            "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
        ),
        _LEAF,
    ),
    "fp16": dict.fromkeys(
        (
            "enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
            "hysteresis", "consecutive_hysteresis", "min_loss_scale",
        ),
        _LEAF,
    ),
    "bf16": dict.fromkeys(("enabled", "immediate_grad_update", "check_grad_overflow"), _LEAF),
    "data_types": {"grad_accum_dtype": _LEAF},
    "zero_optimization": {
        **dict.fromkeys(
            (
                "stage", "allgather_partitions", "allgather_bucket_size", "overlap_comm",
                "reduce_scatter", "reduce_bucket_size", "contiguous_gradients",
                "round_robin_gradients", "sub_group_size", "stage3_max_live_parameters",
                "stage3_max_reuse_distance", "stage3_prefetch_bucket_size",
                "stage3_param_persistence_threshold", "stage3_gather_16bit_weights_on_model_save",
                "ignore_unused_parameters", "zero_hpz_partition_size", "zero_quantized_weights",
                "zero_quantized_gradients", "mics_shard_size", "elastic_checkpoint",
            ),
            _LEAF,
        ),
        "offload_optimizer": dict.fromkeys(_OFFLOAD_KEYS, _LEAF),
        "offload_param": dict.fromkeys(_OFFLOAD_KEYS, _LEAF),
    },
    # Checked against training.optim / lr_scheduler_type and dropped by trainer_core.
    "optimizer": {
        "type": _LEAF,
        "params": {
            **dict.fromkeys(("lr", "eps", "weight_decay", "torch_adam", "adam_w_mode"), _LEAF),
            "betas": _PAIR,
        },
    },
    "scheduler": {
        "type": _LEAF,
        "params": dict.fromkeys(
            ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps",
             "warmup_type"),
            _LEAF,
        ),
    },
    "activation_checkpointing": dict.fromkeys(
        (
            "partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
            "number_checkpoints", "synchronize_checkpoint_boundary",
        ),
        _LEAF,
    ),
}  # fmt: skip
# Offload targets: "nvme" would need an nvme_path, i.e. a file path of the user's choosing.
_OFFLOAD_DEVICES = frozenset({"cpu", "none", "auto"})
_DS = "distributed.deepspeed.config"
_WRITES_FILES = frozenset(
    {
        "tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler", "comms_logger",
        "checkpoint", "aio", "nvme", "elasticity", "autotuning", "compression_training",
        "data_efficiency", "curriculum_learning",
    }
)  # fmt: skip


def deepspeed_config_errors(config: Mapping[str, Any] | None) -> Iterator[FieldError]:
    """Every key of a pass-through DeepSpeed config outside ``DEEPSPEED_ALLOWED``."""
    if config:
        yield from _walk(config, DEEPSPEED_ALLOWED, _DS)


def _walk(node: Mapping[str, Any], allowed: dict[str, Any], loc: str) -> Iterator[FieldError]:
    for key, value in node.items():
        here = f"{loc}.{key}"
        if key not in allowed:
            if loc == _DS and key in _WRITES_FILES:
                why = "is refused: it writes files or talks to the network"
            else:
                why = "is not an allowed DeepSpeed key"
            yield FieldError(here, f"{why}; allowed here: {', '.join(sorted(allowed))}")
        elif isinstance(allowed[key], dict):
            if isinstance(value, dict):
                yield from _walk(value, allowed[key], here)
            else:
                yield FieldError(here, "must be an object")
        elif allowed[key] == _PAIR and isinstance(value, list):
            if len(value) > 8 or any(isinstance(v, dict | list) for v in value):
                yield FieldError(here, "must be a list of at most 8 numbers (or 'auto')")
        elif isinstance(value, dict | list):
            yield FieldError(here, "must be a scalar (or 'auto')")
        elif isinstance(value, str) and len(value) > 64:
            yield FieldError(here, "strings are limited to 64 chars")
        elif key == "device" and value not in _OFFLOAD_DEVICES:
            yield FieldError(here, f"offload device must be one of {sorted(_OFFLOAD_DEVICES)}")
