"""Context parallelism: each sequence split over ``context_parallel_size`` ranks, as torchtitan
and Hugging Face's ``examples/3D_parallel.py`` run it with torch's ``context_parallel``.

The mesh is ``dp x cp`` (cp inner: the ranks of one sequence are adjacent), or ``dp x cp x
tp`` under strategy fsdp+tp (Hugging Face's three dims, torchtitan's order: tp innermost,
``dp_cp`` contiguous, see ``mesh.mesh_dims``): the Megatron plan (``tp.apply_tp``) on the
``tp`` sub-mesh, the ring on ``cp``, FSDP2 over the flattened ``dp_cp``, which the TP
DTensors compose with as torchtitan composes ``dp_shard_cp`` with ``tp``. Inside the ring the
attention sees plain local tensors holding ``heads / tp`` heads of ``1 / cp`` of the
sequence. The ``cp`` (and ``tp``) ranks of one data-parallel rank read the same rows; inside
``cp_step`` torch shards the sequence buffers (``input_ids``, the labels and
``position_ids``) on dim 1 into ``2 x cp`` chunks, each rank keeping a head and a tail chunk
(load-balanced causal split), and swaps
``F.scaled_dot_product_attention`` for ring attention over the ``cp`` group. Gradients are
reduced over the flattened ``dp_cp`` mesh (DDP's process group or FSDP's mesh), as torchtitan
does, and every rank's summed loss is scaled by ``dp x cp / global target count``, so the
step is DDP's over the same rows.

What the batch must look like (``cp_batch``, pure and CPU-tested):

- labels shifted before sharding (position t holds token t+1, -100 at the end), because a
  shard's last position predicts the first token of a chunk another rank holds;
- rows right-aligned (real tokens first, as a right-padding collator makes them) and padded
  to a multiple of ``2 x cp``; causal attention means padding at the end changes no real
  token's output, and its labels are -100; the loss is then the unshifted token
  cross-entropy (the loop's ``cross_entropy_loss(shift=False)``);
- explicit ``position_ids`` (sharded with the tokens, so RoPE sees each token's true
  position) and, inside the context, an all-ones ``attention_mask`` of the local length: with
  it Hugging Face's mask builder neither builds a mask nor reads the non-contiguous local
  positions as packed documents, and SDPA runs with ``is_causal=True`` and no ``attn_mask``,
  the only form torch's ring attention takes; grouped K/V heads are repeated before SDPA
  (no ``enable_gqa``), as torchtitan does.

torch 2.13 dispatches ring attention only for the CUDA SDPA kernels (flash, efficient,
cuDNN); on CPU ``_scaled_dot_product_flash_attention_for_cpu`` has no sharding rule and the
first attention call raises (``scripts/cp_cpu_probe.py``), so the JobSpec refuses CP on CPU
workers and the ring itself is tested in the GPU set (``tests/gpu/test_gpu_context_parallel.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from trainer_core.parallel.torch_engine import TorchEngine

__all__ = [
    "CpMeshes",
    "cp_batch",
    "cp_forward_backward",
    "cp_meshes",
    "cp_step",
    "padded_length",
]


def padded_length(length: int, cp: int) -> int:
    """The smallest multiple of ``2 x cp`` that holds ``length`` tokens."""
    chunks = 2 * cp
    return -(-length // chunks) * chunks


def cp_batch(batch: dict[str, torch.Tensor], cp: int) -> dict[str, torch.Tensor]:
    """``input_ids``, shifted ``labels`` and ``position_ids`` of a causal-LM batch, rows
    right-aligned and padded to ``padded_length``; ``attention_mask`` is dropped (see the
    module docstring). Padding ids are 0 (never a target: their labels are -100)."""
    ids, labels = batch["input_ids"], batch["labels"]
    mask = batch.get("attention_mask")
    keep = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
    rows, length = ids.shape
    width = padded_length(length, cp)
    out_ids = torch.zeros((rows, width), dtype=ids.dtype)
    target = torch.full((rows, width), -100, dtype=labels.dtype)
    for r in range(rows):
        row_ids, row_labels = ids[r][keep[r]], labels[r][keep[r]]
        n = row_ids.numel()
        out_ids[r, :n] = row_ids
        target[r, : max(n - 1, 0)] = row_labels[1:]
    positions = torch.arange(width).unsqueeze(0).expand(rows, width).contiguous()
    return {"input_ids": out_ids, "labels": target, "position_ids": positions}


@contextlib.contextmanager
def cp_step(mesh: DeviceMesh, batch: dict[str, torch.Tensor]) -> Iterator[dict[str, Any]]:
    """Inside: ``batch``'s tensors (from ``cp_batch``, on the device) hold this rank's shards
    and SDPA is ring attention over ``mesh``; yields the model's keyword arguments (all but
    the labels, which stay in ``batch``). Run forward, loss and backward inside."""
    from torch.distributed.tensor.experimental import context_parallel

    buffers = [batch["input_ids"], batch["labels"], batch["position_ids"]]
    with (
        _repeated_kv_heads(),
        context_parallel(
            mesh, buffers=buffers, buffer_seq_dims=[1, 1, 1], no_restore_buffers=set(buffers)
        ),
    ):
        ids = batch["input_ids"]
        yield {
            "input_ids": ids,
            "position_ids": batch["position_ids"],
            "attention_mask": torch.ones_like(ids),
        }


def cp_forward_backward(
    engine: TorchEngine,
    batch: dict[str, torch.Tensor],
    scale: torch.Tensor,
    summed_loss: Callable[[Any, torch.Tensor], torch.Tensor],
    compute: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> torch.Tensor:
    """Forward and backward of one collated micro-batch on this rank's sequence shards;
    returns the summed loss over the shards' targets. ``scale``: the loop's ``dp x cp /
    global count``; ``summed_loss(output, labels)``: the summed loss over the already
    shifted labels; ``compute`` times the forward and loss, as the loop's timer does."""
    if engine.cp_mesh is None:
        raise ValueError("cp_forward_backward needs an engine built with context_parallel_size > 1")
    local = {k: v.to(engine.device) for k, v in cp_batch(batch, engine.cp_size).items()}
    with cp_step(engine.cp_mesh, local) as inputs:
        with compute():
            summed = summed_loss(engine.forward(**inputs), local["labels"])
        engine.backward(summed * scale)
    return summed


@contextlib.contextmanager
def _repeated_kv_heads() -> Iterator[None]:
    """Hugging Face's SDPA path repeats grouped K/V heads itself instead of passing
    ``enable_gqa=True`` (torchtitan's ``repeat_kv``): the ring attention ops take equal head
    counts, and the flag is not among the kernels' arguments the CP dispatcher handles."""
    from transformers.integrations import sdpa_attention

    original = sdpa_attention.use_gqa_in_sdpa
    sdpa_attention.use_gqa_in_sdpa = lambda *_args, **_kwargs: False
    try:
        yield
    finally:
        sdpa_attention.use_gqa_in_sdpa = original


class CpMeshes:
    """The mesh of a context-parallel run and its parts: ``cp`` (ring attention), ``dp``
    (which rows a rank reads), ``dp_cp`` (gradient reduction, FSDP's shard mesh: torchtitan's
    ``dp_shard_cp``) and ``tp`` (the tensor-parallel plan; ``None`` on a ``dp x cp`` mesh)."""

    def __init__(self, mesh: DeviceMesh) -> None:
        names = mesh.mesh_dim_names or ()
        self.mesh = mesh
        self.cp = mesh["cp"]
        self.dp = mesh["dp"]
        self.tp: DeviceMesh | None = mesh["tp"] if "tp" in names else None
        self.dp_cp = mesh["dp", "cp"]._flatten("dp_cp")


_CP_MESHES = (("dp", "cp"), ("dp", "cp", "tp"))


def cp_meshes(device_type: str, dims: list[tuple[str, int]]) -> CpMeshes:
    """The ``dp x cp`` or ``dp x cp x tp`` device mesh of ``dims`` (``mesh.mesh_dims``) over
    the default group."""
    names = tuple(name for name, _ in dims)
    if names not in _CP_MESHES:
        raise ValueError(f"a context-parallel mesh is dp x cp or dp x cp x tp, not {names}")
    mesh = init_device_mesh(device_type, tuple(n for _, n in dims), mesh_dim_names=names)
    return CpMeshes(mesh)
