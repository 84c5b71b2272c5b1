"""Does torch's ``context_parallel`` run on CPU with gloo? (issue 29, context parallel)

Run: ``.venv/bin/torchrun --nproc_per_node 2 --master_port 29731 scripts/cp_cpu_probe.py
[allgather|alltoall]``. Causal SDPA on a sequence split over 2 ranks, compared with the same
attention on one process (output and weight gradient).

Measured with torch 2.13.0+cpu, both rotate methods: the first SDPA call raises
``NotImplementedError: Operator aten._scaled_dot_product_flash_attention_for_cpu.default does
not have a sharding strategy registered``: the CP dispatcher maps only the CUDA kernels
(flash, efficient, cuDNN) to ring attention. Hence CP is refused on CPU workers and its ring
is tested in the GPU set.
"""

from __future__ import annotations

import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import (
    context_parallel_unshard,
    set_rotate_method,
)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
    if len(sys.argv) > 1:
        set_rotate_method(sys.argv[1])
    torch.manual_seed(0)
    batch, heads, seq, dim = 2, 2, 16, 8
    x = torch.randn(batch, heads, seq, dim)
    w = torch.randn(dim, 3 * dim, requires_grad=True)

    def attend(inp: torch.Tensor) -> torch.Tensor:
        q, k, v = (inp @ w).chunk(3, dim=-1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    ref = attend(x)
    ref.sum().backward()
    assert w.grad is not None
    grad_ref, w.grad = w.grad.clone(), None
    shard = x.clone()
    try:
        with context_parallel(mesh, buffers=[shard], buffer_seq_dims=[2]):
            out = attend(shard)
            out.sum().backward()
            (full,) = context_parallel_unshard(mesh, [out.detach()], [2])
        grad = w.grad.clone()
        dist.all_reduce(grad)
        print(rank, "output max diff", float((full - ref).abs().max()),
              "grad max diff", float((grad - grad_ref).abs().max()), flush=True)  # fmt: skip
    except Exception as e:  # the probe's answer: print it
        traceback.print_exc()
        print(rank, "FAILED", type(e).__name__, str(e)[:300], flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
