"""Tensor parallelism for Llama-style blocks with DTensor (Megatron-style plan).

Per block: ``q/k/v`` and ``gate/up`` projections are split by output features
(``ColwiseParallel``), ``o`` and ``down`` by input features (``RowwiseParallel``), so each
attention and MLP sub-block needs one all-reduce forward and one backward. Embeddings, norms
and the LM head stay replicated: every TP rank sees the same batch (data-parallel size 1
inside a TP group), so their gradients agree without extra communication.

Hugging Face's Llama attention (transformers 5.23) reshapes with ``view(..., -1, head_dim)``
and derives the KV repeat factor from the head-count ratio, so the local shards reshape to
``num_heads / tp`` heads without changing the module's attributes.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from trainer_core.parallel.blocks import find_blocks

__all__ = ["apply_tp"]

_COLWISE = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
)
_ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Shard every block's projections over ``tp_mesh`` in place."""
    tp = tp_mesh.size()
    _check_heads(model, tp)
    blocks = find_blocks(model)
    if not blocks:
        raise ValueError(
            f"strategy tp: found no transformer blocks in {type(model).__name__}; "
            "tensor parallelism supports Llama-style decoder models"
        )
    plan: dict[str, ParallelStyle] = {name: ColwiseParallel() for name in _COLWISE}
    plan.update({name: RowwiseParallel() for name in _ROWWISE})
    for block in blocks:
        missing = [name for name in plan if not _has_submodule(block, name)]
        if missing:
            raise ValueError(
                f"strategy tp: block {type(block).__name__} has no {missing}; the TP plan "
                "targets Llama-style blocks (q/k/v/o_proj, gate/up/down_proj)"
            )
        parallelize_module(block, tp_mesh, plan)


def _has_submodule(module: nn.Module, name: str) -> bool:
    try:
        module.get_submodule(name)
    except AttributeError:
        return False
    return True


def _check_heads(model: nn.Module, tp: int) -> None:
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if not isinstance(heads, int) or not isinstance(kv_heads, int):
        return
    if heads % tp or kv_heads % tp:
        raise ValueError(
            f"tensor_parallel_size={tp} must divide num_attention_heads={heads} and "
            f"num_key_value_heads={kv_heads}; pick a TP size that divides both"
        )
