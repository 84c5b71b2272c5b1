"""De-quantized weights of a bitsandbytes-quantized (QLoRA) model, for a merged final model.

A QLoRA job trains LoRA adapters on a base that bitsandbytes holds in 4 or 8 bits. The adapters
learned against the *quantized* weights, so the merged model that reproduces the trained
function is ``dequantize(W_q) + B @ A * scale`` in the compute dtype, not the original float
``W``. ``dequantized_weights(model)`` gives ``dequantize(W_q)`` for every quantized linear,
keyed as ``model.state_dict()`` keys its weight (``...base_layer.weight`` under PEFT), on the
CPU. ``trainer_core.export`` loads them with the other (float) tensors into a plain float copy
of the model and merges the adapters there.

The quantized layers live on the GPU (bitsandbytes' kernels); this runs where they are, one
layer at a time, so no more than one de-quantized layer is on the device at once.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["dequantized_weights", "float_config"]


def dequantized_weights(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``{state-dict key of a quantized weight: its de-quantized value on CPU in dtype}``."""
    import bitsandbytes as bnb
    from bitsandbytes.nn import Linear4bit, Linear8bitLt  # type: ignore[attr-defined]

    out: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if isinstance(module, Linear4bit):
            w: Any = module.weight
            dense = bnb.functional.dequantize_4bit(w.data, w.quant_state)
        elif isinstance(module, Linear8bitLt):
            w8: Any = module.weight
            scb = module.state.SCB if module.state.SCB is not None else w8.SCB
            dense = bnb.functional.int8_vectorwise_dequant(w8.data, scb)
        else:
            continue
        out[f"{name}.weight"] = dense.to("cpu", dtype)
    return out


def float_config(config: Any) -> Any:
    """A copy of a quantized model's config that builds (and writes) a plain float model: no
    ``quantization_config``, so loading the merged model needs no bitsandbytes."""
    plain = copy.deepcopy(config)
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(plain, attr):
            delattr(plain, attr)
    return plain
