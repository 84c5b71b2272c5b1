"""Optimizer-state and quantized-weight bytes of a model, tensor by tensor, with no torch.

``optimizer_state_bytes(shape, training)`` is what ``trainer_core.optim.optimizer_state_bytes``
measures on the optimizer that ``trainer_core.optim.make_optimizer`` builds for full
fine-tuning of the model whose layout is ``shape`` (``shunter.jobspec.model_layouts``), one
replica (unsharded). Per parameter tensor of n elements (b = bytes of the parameter dtype):

- ``adamw_torch(_fused)``: 2 states of n·b, a 4 B step; ``lion``: n·b; ``sgd``: 0;
  ``adafactor``: not counted (O(rows + cols), as the plan notes);
- ``adamw_8bit`` / ``paged_adamw_8bit`` (bitsandbytes): n >= 4096: two uint8 states (2n) and
  an fp32 absmax per block of 256 per state; one shared pair of 256-entry fp32 maps; smaller
  tensors: two fp32 states (8n) (its ``min_8bit_size``);
- ``adamw_torch_8bit`` / ``adamw_torch_4bit`` (torchao): n >= 4096 and a whole number of
  blocks (256 / 128): per state n (n / 2) code bytes, an fp32 scale per block and a
  256 (16)-entry fp32 map; else two states of n·b; a 4 B step;
- ``galore_*`` (``trainer_core.galore``): a target linear's weight (out x in, rank
  r = min(rank, out, in)) has its states on the projected gradient (out x r for the right
  side, r x in for the left; ``projected_shape``) plus an fp32 projector (r x in or out x r);
  other tensors unprojected. Adam states are fp32, 8-bit ones (>= 4096 elements) a byte
  each plus an fp32 absmax per 256; Adafactor keeps rows + cols for a matrix, n for a
  vector. Non-linear tensors of the layout (embeddings) have no known 2-D shape: Adafactor
  counts them at n (an upper bound). A 4 B step per tensor.

``quantized_param_bytes(shape, quant, dtype)``: bitsandbytes' 4-bit layers store half a
byte per weight plus an fp32 absmax per block of 64 (double quantization: an 8-bit absmax per
64 and an fp32 one per 256 of those); 8-bit (LLM.int8) a byte per weight plus an fp32 scale
per row. Biases, embeddings, norms and the output embedding stay unquantized, in float32
(transformers keeps the output embedding unquantized; PEFT's ``prepare_model_for_kbit_training``
casts the unquantized half-precision tensors to float32).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from shunter.jobspec.model_layouts import Layout
from shunter.jobspec.spec import GALORE_OPTIMIZERS, QuantizationSpec, TrainingSpec

__all__ = ["galore_targets", "optimizer_state_bytes", "projected_shape", "quantized_param_bytes"]

_STEP = 4
_MIN_LOW_BIT = 4096


def projected_shape(shape: tuple[int, int], rank: int, proj_type: str) -> tuple[str, int]:
    """(side, rank used) for an m x n gradient; side ``right`` gives an m x r gradient
    (``trainer_core.galore`` imports this: one definition of the rule)."""
    m, n = shape
    r = min(rank, m, n)
    if proj_type == "std":
        return ("right" if m >= n else "left"), r
    if proj_type == "reverse_std":
        return ("left" if m >= n else "right"), r
    return proj_type, r


def galore_targets(shape: Layout, targets: str | list[str] | None) -> list[str]:
    """Linear names GaLore projects: HF's substring match, or every linear but the output."""
    names = [x.name for x in shape.linears if not x.tied]
    if targets == "all-linear":
        return [n for n in names if n != shape.output]
    return [n for n in names if any(t in n for t in targets or ())]


def _adam(n: int, b: int) -> int:
    return 2 * n * b + _STEP


def _bnb8(n: int) -> int:
    return 2 * n + 2 * 4 * math.ceil(n / 256) if n >= _MIN_LOW_BIT else 8 * n


def _torchao(n: int, b: int, block: int, code_bytes: float, map_size: int) -> int:
    if n >= _MIN_LOW_BIT and n % block == 0:
        return 2 * (math.ceil(n * code_bytes) + 4 * (n // block) + 4 * map_size) + _STEP
    return 2 * n * b + _STEP


def _inner(optim: str, n: int, matrix: tuple[int, int] | None) -> int:
    """One GaLore inner-rule state set (fp32) for a gradient of n elements."""
    if optim == "galore_adamw":
        return 8 * n
    if optim == "galore_adamw_8bit":
        return 2 * (n + 4 * math.ceil(n / 256)) if n >= _MIN_LOW_BIT else 8 * n
    return 4 * (matrix[0] + matrix[1]) if matrix is not None else 4 * n  # adafactor


def optimizer_state_bytes(shape: Layout, training: TrainingSpec, dtype_bytes: int) -> int | None:
    """Bytes of the optimizer's states for full fine-tuning; None when not modelled."""
    optim = training.optim
    tensors: list[tuple[str, int, tuple[int, int] | None]] = []
    for x in shape.linears:
        if not x.tied:
            tensors.append((x.name, x.fan_in * x.fan_out, (x.fan_out, x.fan_in)))
        if x.bias:
            tensors.append((x.name + ".bias", x.fan_out, None))
    tensors += [(t.name, t.numel, None) for t in shape.tensors]
    if optim in GALORE_OPTIMIZERS:
        args = training.optim_args
        rank = (args and args.rank) or 128
        proj_type = (args and args.proj_type) or "std"
        chosen = set(galore_targets(shape, training.optim_target_modules))
        total = 0
        for name, n, matrix in tensors:
            if name in chosen and matrix is not None:
                side, r = projected_shape(matrix, rank, proj_type)
                low = (matrix[0], r) if side == "right" else (r, matrix[1])
                ortho = r * (matrix[1] if side == "right" else matrix[0])
                total += _inner(optim, low[0] * low[1], low) + 4 * ortho + _STEP
            else:
                total += _inner(optim, n, matrix) + _STEP
        return total
    per_tensor: Callable[[int], int] | None = {
        "adamw_torch": lambda n: _adam(n, dtype_bytes),
        "adamw_torch_fused": lambda n: _adam(n, dtype_bytes),
        "lion": lambda n: n * dtype_bytes,
        "sgd": lambda n: 0,
        "adamw_8bit": _bnb8,
        "paged_adamw_8bit": _bnb8,
        "adamw_torch_8bit": lambda n: _torchao(n, dtype_bytes, 256, 1, 256),
        "adamw_torch_4bit": lambda n: _torchao(n, dtype_bytes, 128, 0.5, 16),
    }.get(optim)
    if per_tensor is None:
        return None
    total = sum(per_tensor(n) for _, n, _ in tensors)
    if optim in ("adamw_8bit", "paged_adamw_8bit") and any(
        n >= _MIN_LOW_BIT for _, n, _ in tensors
    ):
        total += 2 * 256 * 4  # the two dynamic maps, shared by every tensor
    return total


def quantized_param_bytes(shape: Layout, quant: QuantizationSpec, dtype_bytes: int) -> int:
    """Bytes of the base model's parameters loaded quantized (module docstring). The tensors
    left unquantized are float32 whatever ``dtype_bytes``: PEFT's
    ``prepare_model_for_kbit_training`` (which the trainer runs on a quantized base) casts
    every half-precision parameter that is not quantized to float32."""
    del dtype_bytes  # kept for the callers' symmetry with optimizer_state_bytes
    dtype_bytes = 4
    total = 0
    for x in shape.linears:
        if x.bias:
            total += x.fan_out * dtype_bytes
        if x.tied:
            continue
        n = x.fan_in * x.fan_out
        if x.name == shape.output:
            total += n * dtype_bytes
        elif quant.bits == 8:
            total += n + 4 * x.fan_out
        elif quant.double_quant:
            blocks = math.ceil(n / 64)
            total += math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / 256)
        else:
            total += math.ceil(n / 2) + 4 * math.ceil(n / 64)
    return total + sum(t.numel * dtype_bytes for t in shape.tensors)
