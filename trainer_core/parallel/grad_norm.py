"""Global gradient-norm clipping over any mix of plain tensors and DTensors.

FSDP2 gradients are DTensors sharded over the data-parallel mesh; under TP they live on the
TP mesh, and under FSDP+TP on the 2-D mesh, while parameters TP leaves alone (norms,
embeddings) are sharded on the data-parallel mesh only. ``torch.nn.utils.get_total_norm``
handles one kind at a time, so gradients are grouped by (mesh, placements), each group's norm
is made a full (replicated) value, and the groups are combined. Clipping then scales local
shards, which is correct for every placement and needs no communication.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

__all__ = ["clip_grad_norm"]


@torch.no_grad()
def clip_grad_norm(params: Iterable[nn.Parameter], max_norm: float | None) -> torch.Tensor:
    """Pre-clip global L2 norm of all gradients (0-dim tensor, no host sync); if
    ``max_norm`` is given, scale gradients in place so their norm is at most ``max_norm``."""
    grads = [p.grad for p in params if p.grad is not None]
    groups: dict[object, list[torch.Tensor]] = {}
    for g in grads:
        key: object = (g.device_mesh, tuple(g.placements)) if isinstance(g, DTensor) else None
        groups.setdefault(key, []).append(g)
    norms: list[torch.Tensor] = []
    for key, group in groups.items():
        norm = torch.nn.utils.get_total_norm(group, norm_type=2.0)
        if key is not None:
            # A DTensor norm may be Partial (sum of squares pending); full_tensor reduces it.
            norm = norm.full_tensor()  # type: ignore[attr-defined]
        norms.append(norm.float())
    if not norms:
        return torch.zeros(())
    total: torch.Tensor = torch.linalg.vector_norm(
        torch.stack([n.to(norms[0].device) for n in norms])
    )
    if max_norm is not None:
        # Same formula as torch.nn.utils.clip_grads_with_norm_: never scales up.
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
        for t in local:
            t.mul_(coef.to(device=t.device, dtype=t.dtype))
    return total
