"""MFU of bf16 FSDP2 training through our engine (``trainer_core.parallel.build_engine``).

CUDA (default): a ~1B-parameter Llama (Llama-3.2-1B shape, 32k vocab), FSDP2 with
``MixedPrecisionPolicy(bf16, fp32 reduce)``, AdamW, fixed sequence length, random tokens.
Run it on one GPU (``python bench/mfu.py``) or several (``torchrun --nproc_per_node N``).
CPU (``--tiny``): a small Llama in fp32 over a 1-rank gloo group, against a measured fp32
matmul peak of this machine.

MFU = achieved model FLOPs/s / peak FLOPs/s, with model FLOPs per token as torchtitan counts
them: 6 x (parameters - input embedding) + 12 x layers x hidden x seq_len (attention scores
and values, causal masking not discounted). The plain 6N figure is printed too. Peak: dense
bf16 tensor-core TFLOPs from the table below for the detected GPU, or ``--peak-tflops``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from trainer_core.parallel import ParallelConfig, build_engine, init_distributed

# Dense (no sparsity) bf16 peak TFLOPs per GPU, from the vendors' datasheets.
PEAK_BF16_TFLOPS = {"H100 SXM": 989.4, "H100 PCIe": 756.0, "H100": 989.4, "H200": 989.4,
                    "A100": 312.0, "L40S": 362.0, "A10G": 70.0}  # fmt: skip

ONE_B = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}  # fmt: skip
TINY = {"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 4096,
        "max_position_embeddings": 1024, "tie_word_embeddings": False}  # fmt: skip


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="small model on CPU (fp32)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 10 GPU, 4 CPU)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=None, help="default 2048 GPU, 256 CPU")
    p.add_argument("--batch", type=int, default=None, help="per-rank batch (default 8 GPU, 4 CPU)")
    p.add_argument("--peak-tflops", type=float, default=None, help="override the peak per device")
    p.add_argument("--activation-checkpointing", action="store_true")
    return p.parse_args()


def _peak_gpu_tflops() -> tuple[float, str]:
    name = torch.cuda.get_device_name()
    for key, tflops in PEAK_BF16_TFLOPS.items():  # most specific names first
        if all(part in name for part in key.split()):
            return tflops, f"{key} datasheet bf16 dense"
    raise SystemExit(f"no peak known for {name!r}; pass --peak-tflops")


def _peak_cpu_tflops() -> tuple[float, str]:
    """Best fp32 matmul rate of this process's threads, a practical CPU peak."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(4):
            a @ b
        best = max(best, 4 * 2 * 1024**3 / (time.perf_counter() - start))
    return best / 1e12, f"measured fp32 matmul, {torch.get_num_threads()} threads"


def _ensure_group(cuda: bool) -> None:
    """torchrun sets WORLD_SIZE; a plain ``python bench/mfu.py`` gets a 1-rank group so FSDP2
    (which needs a device mesh) is really applied."""
    if "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1)  # fmt: skip


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    args = _args()
    cuda = torch.cuda.is_available() and not args.tiny
    steps = args.steps or (10 if cuda else 4)
    seq = args.seq_len or (2048 if cuda else 256)
    batch = args.batch or (8 if cuda else 4)
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    _ensure_group(cuda)
    info = init_distributed(use_cuda=cuda)
    peak, peak_source = (args.peak_tflops, "--peak-tflops") if args.peak_tflops else (
        _peak_gpu_tflops() if cuda else _peak_cpu_tflops())  # fmt: skip

    shape = TINY if args.tiny or not cuda else ONE_B
    config = LlamaConfig(**shape, attn_implementation="sdpa")
    torch.manual_seed(0)
    with info.device:  # initialise directly on the GPU: seconds, not minutes, for 1B
        model = LlamaForCausalLM(config)
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable()
    n_params = sum(p.numel() for p in model.parameters())
    n_embed = model.get_input_embeddings().weight.numel()
    L, H = config.num_hidden_layers, config.hidden_size
    flops_per_token = 6 * (n_params - n_embed) + 12 * L * H * seq
    cfg = ParallelConfig(strategy="fsdp", bf16=cuda, micro_batch_size=batch)
    engine = build_engine(model, cfg, make_optimizer=lambda m: torch.optim.AdamW(
        m.parameters(), lr=1e-4, foreach=True), device=info.device)  # fmt: skip

    gen = torch.Generator(device=info.device).manual_seed(info.rank)
    data = torch.randint(0, config.vocab_size, (batch, seq), device=info.device, generator=gen)
    losses = []
    for step in range(args.warmup + steps):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
        loss = engine.forward(input_ids=data, labels=data).loss
        engine.backward(loss)
        engine.clip_and_step(1.0)
        losses.append(loss.detach())
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    world = dist.get_world_size()
    tokens_per_s = batch * seq * steps * world / elapsed
    mfu = flops_per_token * tokens_per_s / (peak * 1e12 * world)
    mfu_6n = 6 * n_params * tokens_per_s / (peak * 1e12 * world)
    if info.rank == 0:
        device = torch.cuda.get_device_name() if cuda else "CPU"
        mem = (
            f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if cuda else ""
        )
        precision = "bf16" if cuda else "fp32"
        ac = ", activation checkpointing" if args.activation_checkpointing else ""
        print(f"device: {device} x{world}; model: Llama {n_params / 1e9:.3f}B params "
              f"(L={L}, H={H}), seq {seq}, batch {batch}/rank, {precision} FSDP2{ac}")  # fmt: skip
        ms = elapsed / steps * 1e3
        first, last = losses[0].item(), losses[-1].item()
        print(f"steps: {steps} timed after {args.warmup} warm-up; {ms:.1f} ms/step{mem}; "
              f"loss {first:.3f} -> {last:.3f}")  # fmt: skip
        print(f"throughput: {tokens_per_s:,.0f} tokens/s ({tokens_per_s / world:,.0f} per device)")
        print(f"peak: {peak:.3f} TFLOPs/device ({peak_source})")
        print(f"MFU: {mfu:.1%} (torchtitan FLOPs/token {flops_per_token / 1e9:.2f} GFLOP); "
              f"6N MFU: {mfu_6n:.1%}")  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
