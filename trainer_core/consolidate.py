"""A step checkpoint as a model: the resume format consolidated into the final-model layout.

``export_checkpoint(model_cfg, checkpoint, out)`` verifies ``checkpoint``'s manifest, builds
the job's model on this process's CPU exactly as training built it (``build_model``: the same
architecture, LoRA/PEFT wrapping and non-persistent buffers), loads the checkpoint's weights
into it, and writes ``out`` with ``trainer_core.export.write_model``: the layout of a final
model (HF ``config.json`` + safetensors + tokenizer; a PEFT adapter for LoRA/PEFT jobs, merged
when the spec says ``merge_on_save``). One process, no process group:

- torch strategies (single, DDP, FSDP2, TP, FSDP2+TP) wrote DCP shards whose keys are the
  unwrapped model's names (``TorchEngine.save``); ``dcp.load`` with ``no_dist`` reads every
  shard into the whole tensors of the fresh model, so N ranks' shards become one model
  (DCP reshards N -> 1). Only the ``model`` entries are read; optimizer state is skipped.
- DeepSpeed wrote ``deepspeed/`` (``DeepSpeedEngine.save``); ZeRO 1-3 partitions are merged
  into fp32 weights by DeepSpeed's own ``zero_to_fp32``, stage 0 holds the module whole.

The service runs this in a child process (``python -m trainer_core export-checkpoint``), so
it never imports torch itself; ``service.jobs.checkpoint_models`` caches the result.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

from trainer_core.config import ModelConfig
from trainer_core.export import write_model
from trainer_core.hub import fetch_models
from trainer_core.manifest import verify_checkpoint
from trainer_core.model import build_model, build_tokenizer

__all__ = ["export_checkpoint", "load_checkpoint_weights"]

_DEEPSPEED_TAG = "deepspeed"  # trainer_core.parallel.deepspeed_engine._TAG


def export_checkpoint(
    model_cfg: ModelConfig, checkpoint: Path, out: Path, *, seed: int = 0
) -> Path:
    """Write ``checkpoint``'s model to ``out`` (final-model layout); returns ``out``.
    Raises ``ValueError`` when the checkpoint does not verify against its manifest."""
    problem = verify_checkpoint(checkpoint)
    if problem is not None:
        raise ValueError(f"checkpoint {checkpoint} failed verification: {problem}")
    fetch_models(model_cfg)  # a hub base: the node's cache (offline: it must be there)
    tokenizer = build_tokenizer(model_cfg)
    model = build_model(model_cfg, tokenizer, seed=seed)  # init is overwritten below
    load_checkpoint_weights(model, checkpoint)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return write_model(model, state, tokenizer, model_cfg, out)


def load_checkpoint_weights(model: torch.nn.Module, checkpoint: Path) -> None:
    """Load the model weights of a checkpoint written by any engine into ``model`` (whole,
    unwrapped, on CPU). Every persistent tensor must be found: a missing one raises."""
    if (checkpoint / _DEEPSPEED_TAG).is_dir():
        _load_deepspeed(model, checkpoint)
        return
    state: dict[str, Any] = {"model": get_model_state_dict(model)}
    # Reads only the "model" entries of the shards (all ranks' files), resharded to whole
    # tensors; a key of the model missing from the checkpoint is an error (no partial load).
    dcp.load(state, checkpoint_id=str(checkpoint), no_dist=True)  # type: ignore[attr-defined]
    set_model_state_dict(model, state["model"])


def _load_deepspeed(model: torch.nn.Module, checkpoint: Path) -> None:
    os.environ.setdefault("DS_BUILD_OPS", "0")
    tag_dir = checkpoint / _DEEPSPEED_TAG
    if any(tag_dir.glob("*optim_states.pt")):  # ZeRO 1-3: merge the fp32 partitions
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint), tag=_DEEPSPEED_TAG)
    else:  # stage 0: the module is whole in rank 0's model states
        saved = torch.load(tag_dir / "mp_rank_00_model_states.pt", weights_only=True)
        state = saved["module"]
    own = model.state_dict()
    state = {k: v.to(own[k].dtype) if k in own else v for k, v in state.items()}
    model.load_state_dict(state, strict=True)
