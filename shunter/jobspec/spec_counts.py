"""A spec's parameter counts (all, trainable): the config trainer_core builds, counted.

``spec_param_counts(spec, local_config=..., tokenizer_size=...)`` merges what
``trainer_core.model.build_model`` merges: a local model's ``config.json`` (or, from scratch
without ``name_or_path``, ``config_overrides.model_type``'s defaults), then
``config_overrides``; a from-scratch vocabulary is the tokenizer's size unless
``vocab_size`` is pinned; then the task's labels. Counting is
``shunter.jobspec.param_count``. The caller reads the files: the service through its pass-2
path checks, ``shunter validate`` from folders relative to the working directory
(``local_counts``). Hub models are unknown (None): nothing here goes to the network.

``spec_memory_facts`` / ``local_memory_facts``: ``plan_for``'s ``optimizer_state_bytes`` and
``quantized_param_bytes`` from the same config's layout (``shunter.jobspec.optim_bytes``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shunter.jobspec.model_files import read_config, tokenizer_size
from shunter.jobspec.model_layouts import layout
from shunter.jobspec.optim_bytes import optimizer_state_bytes, quantized_param_bytes
from shunter.jobspec.param_count import HEAD_OF_TASK, count_params, task_config, trainable_params
from shunter.jobspec.spec import JobSpec

__all__ = [
    "local_counts",
    "local_memory_facts",
    "spec_memory_facts",
    "spec_model_config",
    "spec_param_counts",
]
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def spec_model_config(
    spec: JobSpec, *, local_config: dict[str, Any] | None, vocab_size: int | None
) -> dict[str, Any] | None:
    """The config dict the spec's model is built from; None when it cannot be known.

    ``local_config``: ``name_or_path``'s ``config.json`` (None for a hub model);
    ``vocab_size``: ``len(tokenizer)``, used by a from-scratch model without its own.
    """
    m = spec.model
    overrides = {k: v for k, v in m.config_overrides.items() if k != "model_type"}
    if m.name_or_path is not None:
        if local_config is None:
            return None
        config = {**local_config, **overrides}
    else:
        config = dict(m.config_overrides)  # from scratch: rules require model_type
    if m.from_scratch and "vocab_size" not in overrides:
        # trainer_core sizes a fresh vocabulary to the tokenizer unless it is pinned.
        if vocab_size is None:
            return None
        config["vocab_size"] = vocab_size
    return task_config(config, m.task, m.num_labels)


def spec_param_counts(
    spec: JobSpec, *, local_config: dict[str, Any] | None, vocab_size: int | None
) -> tuple[int | None, int | None]:
    """(all parameters, trainable ones) of the spec's model; None where unknown."""
    config = spec_model_config(spec, local_config=local_config, vocab_size=vocab_size)
    if config is None:
        return None, None
    m = spec.model
    total = count_params(config, m.task)
    if total is None:
        return None, None
    if m.lora is None and m.peft is None:
        return total, total
    return total, trainable_params(config, m.task, lora=m.lora, peft=m.peft)


def spec_memory_facts(
    spec: JobSpec, *, local_config: dict[str, Any] | None, vocab_size: int | None
) -> dict[str, int | None]:
    """``optimizer_state_bytes`` (full fine-tuning only: adapters' shapes are not modelled)
    and ``quantized_param_bytes`` for ``plan_for``; None where unknown."""
    facts: dict[str, int | None] = {"optimizer_state_bytes": None, "quantized_param_bytes": None}
    m = spec.model
    config = spec_model_config(spec, local_config=local_config, vocab_size=vocab_size)
    head = HEAD_OF_TASK.get(m.task)
    shape = None if config is None or head is None else layout(config, head)
    if shape is None:
        return facts
    b = _DTYPE_BYTES[m.dtype]
    if m.lora is None and m.peft is None:
        facts["optimizer_state_bytes"] = optimizer_state_bytes(shape, spec.training, b)
    if m.quantization is not None:
        facts["quantized_param_bytes"] = quantized_param_bytes(shape, m.quantization, b)
    return facts


def local_memory_facts(spec: JobSpec, base: Path | None = None) -> dict[str, int | None]:
    """``spec_memory_facts`` offline, with ``local_counts``' folders."""
    local_config, vocab = _local_inputs(spec, base)
    return spec_memory_facts(spec, local_config=local_config, vocab_size=vocab)


def local_counts(spec: JobSpec, base: Path | None = None) -> tuple[int | None, int | None]:
    """Counts offline: ``name_or_path`` / ``tokenizer`` read as folders under ``base`` (the
    working directory by default) when they are; otherwise unknown as for a hub model."""
    local_config, vocab = _local_inputs(spec, base)
    return spec_param_counts(spec, local_config=local_config, vocab_size=vocab)


def _local_inputs(spec: JobSpec, base: Path | None) -> tuple[dict[str, Any] | None, int | None]:
    """The model's config.json and (from scratch) the tokenizer's size, from the folders
    ``name_or_path`` / ``tokenizer`` name under ``base`` when they are folders."""
    m = spec.model
    model_dir = _folder(m.name_or_path, base)
    local_config = read_config(model_dir) if model_dir is not None else None
    tok_dir = _folder(m.tokenizer or m.name_or_path, base)
    vocab = tokenizer_size(tok_dir) if m.from_scratch and tok_dir is not None else None
    return local_config, vocab


def _folder(value: str | None, base: Path | None) -> Path | None:
    if value is None:
        return None
    path = Path(value) if base is None else base / value
    return path if path.is_dir() else None
