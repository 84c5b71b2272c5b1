"""Build the tokenizer and the task's model (pretrained or from a config), optionally LoRA.

Contract: ``build_tokenizer(cfg)`` loads ``cfg.tokenizer or cfg.name_or_path`` and gives it
a pad token when it has none (EOS, else UNK: causal LMs usually ship without one).
``build_model(cfg, tokenizer, seed=...)`` returns the ``AutoModelFor<task>`` on CPU in
``cfg.dtype``: from ``name_or_path`` weights, or (``from_scratch``) freshly initialised from
``name_or_path``'s config or ``AutoConfig.for_model(model_type)``, both with
``config_overrides`` applied, initialised under ``torch.manual_seed(seed)`` so every rank
builds identical weights. LoRA (peft) wraps it last; only adapter weights (and the
classification head, which a new task needs) are trainable.

``model.quantization`` (QLoRA, GPU workers only: the validator refuses it elsewhere) loads
the base through transformers' ``BitsAndBytesConfig`` (4-bit nf4/fp4 with ``compute_dtype``
and optional double quantization, or 8-bit) onto this rank's GPU, then PEFT's
``prepare_model_for_kbit_training`` before LoRA, as PEFT's QLoRA recipe does.

A spec is data: loading is always ``trust_remote_code=False``, weights come from safetensors
only (unless ``SHUNTER_ALLOW_PICKLE_WEIGHTS``), and ``config_overrides`` may not carry loader
arguments (``config_only``), the same rule the service enforces at submit.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from shunter.jobspec.safety import LOADER_ARGS
from trainer_core.config import ModelConfig, torch_dtype
from trainer_core.tasks import task_ops

__all__ = ["build_model", "build_tokenizer", "model_class"]


def model_class(task: str) -> Any:
    """The ``AutoModelFor*`` class that loads a final model of ``task``."""
    return getattr(transformers, task_ops(task).auto_class)


def build_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    source = cfg.tokenizer or cfg.name_or_path
    assert source is not None  # ModelConfig.__post_init__ guarantees one
    tok = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    return tok


def build_model(
    cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase, *, seed: int
) -> torch.nn.Module:
    auto = model_class(cfg.task)
    extra = task_ops(cfg.task).model_kwargs(cfg.num_labels)  # num_labels, problem_type, ...
    if cfg.from_scratch:
        model_config = _scratch_config(cfg, tokenizer, extra)
        torch.manual_seed(seed)  # identical init on every rank; restored RNG takes over later
        model = auto.from_config(model_config, dtype=torch_dtype(cfg))
    else:
        assert cfg.name_or_path is not None  # ModelConfig: weights need a source
        model = auto.from_pretrained(
            cfg.name_or_path,
            **quantization_kwargs(cfg),
            dtype=torch_dtype(cfg),
            trust_remote_code=False,
            use_safetensors=None if _pickle_allowed() else True,
            **extra,
            **config_only(cfg.config_overrides),
        )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id  # sequence-cls finds the last token
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False  # the KV cache is useless in training and conflicts
    if cfg.quantization is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(  # type: ignore[no-untyped-call]
            model, use_gradient_checkpointing=cfg.gradient_checkpointing
        )
    if cfg.lora is not None:
        model = _apply_lora(model, cfg)
    elif cfg.peft is not None:
        model = _apply_adapter(model, cfg)
    module: torch.nn.Module = model
    return module


def quantization_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    """``from_pretrained`` arguments of a quantized base: a ``BitsAndBytesConfig`` and this
    rank's GPU (bitsandbytes quantizes as the weights reach the device); {} without one."""
    q = cfg.quantization
    if q is None:
        return {}
    from transformers import BitsAndBytesConfig

    if q.bits == 8:
        config = BitsAndBytesConfig(load_in_8bit=True)  # type: ignore[no-untyped-call]
    else:
        config = BitsAndBytesConfig(  # type: ignore[no-untyped-call]
            load_in_4bit=True,
            bnb_4bit_quant_type=q.quant_type or "nf4",
            bnb_4bit_compute_dtype=compute_dtype(q),
            bnb_4bit_use_double_quant=q.double_quant,
        )
    device = int(os.environ.get("LOCAL_RANK", "0"))
    return {"quantization_config": config, "device_map": {"": device}}


_COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def compute_dtype(q: Any) -> torch.dtype:
    """The dtype a quantized base computes in (``model.quantization.compute_dtype``)."""
    return _COMPUTE_DTYPES[q.compute_dtype]


def _scratch_config(
    cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase, extra: dict[str, Any]
) -> PretrainedConfig:
    overrides = config_only(cfg.config_overrides)
    # The vocabulary must cover the tokenizer's ids unless the user pinned it.
    overrides.setdefault("vocab_size", len(tokenizer))
    overrides.setdefault("pad_token_id", tokenizer.pad_token_id)
    overrides.update(extra)
    if cfg.name_or_path is not None:
        overrides.pop("model_type", None)
        config: PretrainedConfig = AutoConfig.from_pretrained(
            cfg.name_or_path, trust_remote_code=False, **overrides
        )
        return config
    model_type = overrides.pop("model_type")
    config = AutoConfig.for_model(model_type, **overrides)
    return config


def config_only(overrides: dict[str, Any]) -> dict[str, Any]:
    """``config_overrides`` as config fields only (defence in depth: the service already
    refused these at submit, see ``shunter.jobspec.safety``); a loader argument raises."""
    bad = sorted(k for k in overrides if k in LOADER_ARGS or k.startswith("_"))
    if bad:
        raise ValueError(
            f"model.config_overrides: {bad} are loader arguments, not model-config fields"
        )
    return dict(overrides)


def _pickle_allowed() -> bool:
    # Admin setting shared with the service (SHUNTER_ALLOW_PICKLE_WEIGHTS); off = safetensors only.
    return os.environ.get("SHUNTER_ALLOW_PICKLE_WEIGHTS", "").lower() in {"1", "true", "yes"}


def _apply_lora(model: PreTrainedModel, cfg: ModelConfig) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model  # peft imports are slow; only when used

    assert cfg.lora is not None
    lora = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=cfg.lora.target_modules,
        task_type=task_ops(cfg.task).peft_task,
    )
    return get_peft_model(model, lora)


def _apply_adapter(model: PreTrainedModel, cfg: ModelConfig) -> torch.nn.Module:
    """IA3 or prefix tuning from ``model.peft`` (the spec validated the combination)."""
    from peft import IA3Config, PrefixTuningConfig, get_peft_model

    assert cfg.peft is not None
    task_type = task_ops(cfg.task).peft_task
    config: Any
    if cfg.peft.adapter == "ia3":
        config = IA3Config(
            task_type=task_type,
            target_modules=cfg.peft.target_modules,
            feedforward_modules=cfg.peft.feedforward_modules,
        )
    elif cfg.peft.adapter == "prefix_tuning":
        config = PrefixTuningConfig(
            task_type=task_type, num_virtual_tokens=cfg.peft.num_virtual_tokens or 20
        )
    else:
        raise ValueError(f"model.peft.adapter {cfg.peft.adapter!r}: use ia3 or prefix_tuning")
    wrapped: torch.nn.Module = get_peft_model(model, config)
    return wrapped
