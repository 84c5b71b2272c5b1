"""The final model: ``save_pretrained`` (+ tokenizer) so ``AutoModelFor*.from_pretrained`` loads it.

Every rank calls ``save_final`` (gathering a sharded state dict is a collective); rank 0
writes. For LoRA the directory holds the PEFT adapter (``adapter_config.json`` +
``adapter_model.safetensors``, loadable with ``peft.AutoPeftModelFor*``), or, with
``merge_on_save`` (``model.lora`` or an IA3 ``model.peft``), the merged full model in the plain
HF layout.

Merging needs every weight whole in one process, and under FSDP2 or ZeRO-3 no rank holds
them. So the merge never touches the training model: the engine gathers the full state dict
(the collective every strategy already implements for ``save_pretrained``), and rank 0 loads
it into a fresh CPU copy of the PEFT model (built on the meta device, so no weights are
initialised for nothing) and merges that. The same path for every strategy, so a merged model
from an FSDP or ZeRO-3 run equals the one from a DDP run of the same seed.

An unmerged adapter over a base that exists nowhere else (``from_scratch``, or
``config_overrides`` that make it differ from its ``name_or_path``) is useless alone: the final
directory then also holds that base in ``base/`` (``config.json`` + weights, from the same fresh
CPU copy, adapter removed), and ``adapter_config.json``'s ``base_model_name_or_path`` names it.
Not beside the adapter: transformers loads a directory holding both ``config.json`` and
``adapter_config.json`` as base + embedded adapter, which fails for prefix tuning and would apply
a LoRA twice under ``AutoPeftModel``. PEFT resolves ``base_model_name_or_path`` as given (a
relative path against the working directory, not the adapter's), so it is written absolute;
after a move, ``relocate_adapter`` rewrites it, and
``PeftModel.from_pretrained(AutoModelFor*.from_pretrained(dir / "base"), dir)`` needs no
rewrite. A base with a name (hub id or local path) is referenced by it, as before: adapter
files only.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from trainer_core.config import ModelConfig
from trainer_core.engine import Engine

__all__ = [
    "BASE_DIR",
    "dequantized_merged_copy",
    "merged_copy",
    "relocate_adapter",
    "save_final",
    "write_model",
]

BASE_DIR = "base"  # the unnamed base of an unmerged adapter, inside the final directory


def save_final(
    engine: Engine, tokenizer: PreTrainedTokenizerBase, cfg: ModelConfig, out: Path
) -> Path:
    state = engine.full_state_dict()  # collective for sharded engines; {} off rank 0
    is_main = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    if is_main:
        write_model(engine.unwrapped, state, tokenizer, cfg, out)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank reports "done" before the files exist
    return out


def write_model(
    model: Any,
    state: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
    cfg: ModelConfig,
    out: Path,
) -> Path:
    """Write ``out`` in the layout above from ``model`` (the unwrapped HF or PEFT model, whole
    on this process's CPU or device) and its full state dict ``state`` (keys are
    ``model.state_dict()``'s). One process, no collective: ``save_final``'s rank 0, and
    ``trainer_core.consolidate`` for a step checkpoint."""
    out.mkdir(parents=True, exist_ok=True)
    adapter = cfg.lora or cfg.peft
    with _cache_on(model), _no_deepspeed_probe():
        if adapter is not None and adapter.merge_on_save and cfg.quantization is not None:
            dequantized_merged_copy(model, state, cfg).save_pretrained(out)
        elif adapter is not None and adapter.merge_on_save:
            merged_copy(model, state).save_pretrained(out)
        else:
            model.save_pretrained(out, state_dict=state)
            if adapter is not None and _base_is_unnamed(cfg):
                base_copy(model, state).save_pretrained(out / BASE_DIR)
                relocate_adapter(out)
    tokenizer.save_pretrained(out)
    return out


@contextlib.contextmanager
def _no_deepspeed_probe() -> Iterator[None]:
    """``save_pretrained`` unwraps the model with accelerate's ``extract_model_from_parallel``,
    which imports DeepSpeed (when it is installed) only to ask whether the model is a
    ``DeepSpeedEngine``: 1-3 s of CPU at the end of every job, MLflow and accelerate's
    trackers on the way (issue #33). Nothing can be an instance of a class never imported, so
    while ``deepspeed`` is not in ``sys.modules`` the question is answered "no" without it."""
    if "deepspeed" in sys.modules:
        yield
        return
    try:
        from accelerate.utils import other
    except ImportError:  # no accelerate: transformers unwraps by ``.module`` itself
        yield
        return
    probe = other.is_deepspeed_available
    other.is_deepspeed_available = lambda: False
    try:
        yield
    finally:
        other.is_deepspeed_available = probe


@contextlib.contextmanager
def _cache_on(model: Any) -> Iterator[None]:
    """Causal LMs train with ``use_cache=False`` (the tasks' ``model_kwargs``: no KV cache is
    built in each forward), which their config and generation config would carry into the
    written model, and ``generate`` would then run without a cache. What is written has
    it on, as the library's default; the training model is left as it was."""
    off = [
        owner
        for owner in (getattr(model, "config", None), getattr(model, "generation_config", None))
        if owner is not None and getattr(owner, "use_cache", None) is False
    ]
    for owner in off:
        owner.use_cache = True
    try:
        yield
    finally:
        for owner in off:
            owner.use_cache = False


def merged_copy(peft_model: Any, state: dict[str, torch.Tensor]) -> Any:
    """The base model with ``peft_model``'s adapters merged, from a full (gathered) state dict
    whose keys are ``peft_model.state_dict()``'s. Built on CPU; ``peft_model`` is untouched."""
    return _fresh_copy(peft_model, state).merge_and_unload()


def dequantized_merged_copy(
    peft_model: Any, state: dict[str, torch.Tensor], cfg: ModelConfig
) -> Any:
    """QLoRA's merge: the adapters merged into the de-quantized base (``trainer_core.dequant``:
    the weights the adapters were trained against), in the quantization's compute dtype, as a
    plain float model (its config has no ``quantization_config``)."""
    from trainer_core.dequant import dequantized_weights, float_config
    from trainer_core.model import compute_dtype

    assert cfg.quantization is not None
    dtype = compute_dtype(cfg.quantization)
    dense = dequantized_weights(peft_model, dtype)
    config = float_config(peft_model.get_base_model().config)
    fresh = _fresh_copy(peft_model, None, config=config)
    # Every key of the float copy comes from the de-quantized weights or the gathered state;
    # the quantized layers' extra keys (absmax, quant maps, SCB) have no place in it.
    fresh.load_state_dict(
        {k: dense[k] if k in dense else state[k] for k in fresh.state_dict()}, strict=True
    )
    _restore_buffers(fresh, peft_model.get_base_model())
    return fresh.merge_and_unload().to(dtype)


def base_copy(peft_model: Any, state: dict[str, torch.Tensor]) -> Any:
    """The base model alone (adapters dropped, not merged) from a full (gathered) state dict
    whose keys are ``peft_model.state_dict()``'s (``base_model.model.``-prefixed, LoRA's
    ``base_layer``s...): loading it into a fresh copy lets PEFT undo its own key layout."""
    fresh = _fresh_copy(peft_model, state)
    if fresh.peft_config["default"].is_prompt_learning:  # prefix tuning: base is not wrapped
        return fresh.get_base_model()
    return fresh.unload()


def relocate_adapter(directory: Path) -> None:
    """Point ``directory``'s ``adapter_config.json`` at ``directory / BASE_DIR`` (absolute: PEFT
    reads it as given), for an adapter saved with its base; call it again after a move."""
    path = directory / "adapter_config.json"
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = str((directory / BASE_DIR).resolve())
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _base_is_unnamed(cfg: ModelConfig) -> bool:
    """No name re-creates the trained base: random init, or a config changed from its name's."""
    return cfg.from_scratch or bool(cfg.config_overrides) or cfg.name_or_path is None


def _fresh_copy(
    peft_model: Any, state: dict[str, torch.Tensor] | None, *, config: Any = None
) -> Any:
    """A CPU copy of ``peft_model`` (its base built from ``config``, by default the base's)
    holding ``state``, built on meta (no wasted init); ``state`` None: left for the caller."""
    from peft import get_peft_model  # peft imports are slow; only when used

    base = peft_model.get_base_model()
    with torch.device("meta"):
        fresh = get_peft_model(
            type(base)(config or base.config), copy.deepcopy(peft_model.peft_config["default"])
        )
    fresh.to_empty(device="cpu")
    if state is not None:
        # Persistent tensors come from the gathered state; strict: a missing key is a bug here.
        fresh.load_state_dict(state, strict=True)
        _restore_buffers(fresh, base)
    return fresh


def _restore_buffers(fresh: torch.nn.Module, base: torch.nn.Module) -> None:
    """Non-persistent buffers (rotary ``inv_freq``...) are not in a state dict; ``to_empty``
    left them uninitialised. Copy them from the training model, where they are whole."""
    source = dict(base.named_buffers())
    for name, buf in fresh.get_base_model().named_buffers():  # type: ignore[operator]
        if name in source:
            buf.copy_(source[name].detach().to("cpu", buf.dtype))
