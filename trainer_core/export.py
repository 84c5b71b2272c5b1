"""The final model: ``save_pretrained`` (+ tokenizer) so ``AutoModelFor*.from_pretrained`` loads it.

Every rank calls ``save_final`` (gathering a sharded state dict is a collective); rank 0
writes. For LoRA the directory holds the PEFT adapter (``adapter_config.json`` +
``adapter_model.safetensors``, loadable with ``peft.AutoPeftModelFor*``), or, with
``lora.merge_on_save``, the merged full model. Merging needs the full weights in one process,
so it is supported for unsharded strategies (single process, DDP).
"""

from __future__ import annotations

from pathlib import Path

import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from trainer_core.config import ModelConfig
from trainer_core.engine import Engine

__all__ = ["save_final"]


def save_final(
    engine: Engine, tokenizer: PreTrainedTokenizerBase, cfg: ModelConfig, out: Path
) -> Path:
    state = engine.full_state_dict()  # collective for sharded engines; {} off rank 0
    is_main = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        model = engine.unwrapped
        if cfg.lora is not None and cfg.lora.merge_on_save:
            model.merge_and_unload().save_pretrained(out)  # type: ignore[operator]
        else:
            model.save_pretrained(out, state_dict=state)  # type: ignore[operator]
        tokenizer.save_pretrained(out)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank reports "done" before the files exist
    return out
