"""What the warm children of ``test_warm_gpu.py`` run (imported in the child)."""

from __future__ import annotations

import socket
from typing import Any

from worker import warm


def cuda_job(channel: Any) -> dict[str, Any]:
    """CUDA, an NCCL group and a tiny Llama's forward and backward, in a forked child."""
    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    step = warm.payload(channel)
    out: dict[str, Any] = {"initialized_at_start": torch.cuda.is_initialized()}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))  # fmt: skip
    flag = torch.ones(1, device="cuda") * step
    dist.all_reduce(flag)
    out["all_reduce"] = float(flag.item())
    dist.destroy_process_group()
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
                      max_position_embeddings=128)  # fmt: skip
    model = LlamaForCausalLM(cfg).cuda()
    ids = torch.randint(0, 1000, (2, 32), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    out["loss"] = float(loss.detach())
    return out
