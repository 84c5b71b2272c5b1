"""Memory-saving optimizers against AdamW: final loss, optimizer-state bytes, plan (issue #29).

A tiny Llama (hidden 128, 2 layers, vocab 512: every weight matrix has >= 4096 elements, so
the 8-bit/4-bit optimizers quantize them) trains ``--steps`` steps on CPU, one process, on
the strategy harness's deterministic arithmetic-sequence batches (the same every run), once
per optimizer, through ``trainer_core.optim.make_optimizer`` (the trainer's own). Printed per
optimizer: the final loss (mean of the last 5 steps) and its ratio to AdamW's, the measured
optimizer-state bytes (``trainer_core.optim.optimizer_state_bytes``: every state tensor,
quantized ones by their inner tensors) and their ratio to AdamW's, the plan's optimizer bytes
(``shunter.jobspec.plan``, from the model's layout) and plan / measured, and seconds.

The issue's bars: GaLore and 8-bit final loss within 5% of AdamW's over 60 steps; 8-bit
state bytes <= 0.35x AdamW's; GaLore's plan within 10% of measured.

Run: ``.venv/bin/python bench/optimizers.py [--steps 60] [--optims a,b,...]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shunter.jobspec import TrainingSpec, validate
from shunter.jobspec.plan import plan_for
from shunter.jobspec.spec_counts import spec_memory_facts
from trainer_core.optim import make_optimizer, optimizer_state_bytes

MODEL: dict[str, Any] = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
GALORE_ARGS = {"optim_target_modules": ["attn", "mlp"], "optim_args": {"rank": 32}}
# optimizer -> TrainingSpec keys (besides learning_rate).
OPTIMS: dict[str, dict[str, Any]] = {
    "adamw_torch": {},
    "adamw_8bit": {},
    "paged_adamw_8bit": {},
    "adamw_torch_8bit": {},
    "adamw_torch_4bit": {},
    "galore_adamw": {
        "optim_args": {"rank": 32, "scale": 1.0},
        "optim_target_modules": "all-linear",
    },
    "galore_adamw_8bit": {
        "optim_args": {"rank": 32, "scale": 1.0},
        "optim_target_modules": "all-linear",
    },
    "galore_adafactor": {
        "optim_args": {"rank": 32, "scale": 1.0},
        "optim_target_modules": "all-linear",
    },
}


def batch(step: int, rows: int, seq_len: int, vocab: int | None = None) -> torch.Tensor:
    """The strategy harness's step batch: learnable arithmetic sequences, seeded by step."""
    vocab = int(vocab or MODEL["vocab_size"])
    g = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, vocab, (rows, 1), generator=g)
    stride = torch.randint(1, 4, (rows, 1), generator=g)
    return (start + stride * torch.arange(seq_len)) % vocab


def train(
    optim: str,
    *,
    steps: int,
    lr: float,
    rows: int,
    seq_len: int,
    warmup: int = 0,
    device: str = "cpu",
    model_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``steps`` steps of ``optim``; on CUDA also the allocator's view: ``cuda_state_bytes``
    (memory allocated after a step with gradients freed, less the model's) and
    ``cuda_peak_bytes`` (``max_memory_allocated``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = model_config or MODEL
    torch.manual_seed(0)
    config = {k: v for k, v in shape.items() if k != "model_type"}
    model = LlamaForCausalLM(LlamaConfig(**config)).to(device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        weights = torch.cuda.memory_allocated()
    training = TrainingSpec(optim=optim, learning_rate=lr, **OPTIMS[optim])  # type: ignore[arg-type]
    opt = make_optimizer(model, training)
    # Linear warmup, then linear decay to 0 (HF's default "linear" schedule).
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / (steps - warmup))
    )
    losses = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        ids = batch(step, rows, seq_len, int(shape["vocab_size"])).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    tail = losses[-5:]
    out = {
        "final": sum(tail) / len(tail),
        "bytes": optimizer_state_bytes(opt),
        "planned": planned_bytes(optim, lr, shape, gpus=1 if cuda else 0),
        "seconds": seconds,
    }
    if cuda:
        torch.cuda.synchronize()
        out["cuda_state_bytes"] = torch.cuda.memory_allocated() - weights
        out["cuda_peak_bytes"] = torch.cuda.max_memory_allocated()
    return out


def planned_bytes(
    optim: str, lr: float, model_config: dict[str, Any] | None = None, gpus: int = 0
) -> int | None:
    spec = validate(
        {
            "name": "bench",
            "model": {
                "task": "causal-lm",
                "from_scratch": True,
                "tokenizer": "tok",
                "config_overrides": model_config or MODEL,
            },
            "data": {"train": "train.txt"},
            "training": {"optim": optim, "learning_rate": lr, **OPTIMS[optim]},
            "resources": {"num_workers": 1, "gpus_per_worker": gpus},
        }
    )
    facts = spec_memory_facts(spec, local_config=None, vocab_size=None)
    return plan_for(spec, param_count=1, **facts).memory.optimizer_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=6, help="warmup steps of the linear schedule")
    ap.add_argument("--optims", default=None, help="default: all (paged_adamw_8bit: CUDA only)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (also prints CUDA bytes)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    names = (
        args.optims.split(",")
        if args.optims
        else [n for n in OPTIMS if args.device != "cpu" or n != "paged_adamw_8bit"]
    )
    if "adamw_torch" not in names:
        names.insert(0, "adamw_torch")
    results = {
        n: train(
            n,
            steps=args.steps,
            lr=args.lr,
            rows=args.rows,
            seq_len=args.seq_len,
            warmup=args.warmup,
            device=args.device,
        )
        for n in names
    }
    base = results["adamw_torch"]
    print(
        f"{args.steps} steps, lr {args.lr} (linear, {args.warmup} warmup), "
        f"{args.rows} x {args.seq_len} tokens per step"
    )
    print(
        f"{'optimizer':<20}{'final loss':>11}{'x adamw':>9}{'state bytes':>13}{'x adamw':>9}"
        f"{'plan bytes':>12}{'plan/meas':>10}{'seconds':>9}"
    )
    for name, r in results.items():
        plan = r["planned"]
        ratio = "-" if plan is None else f"{plan / r['bytes']:.3f}"
        print(
            f"{name:<20}{r['final']:>11.4f}{r['final'] / base['final']:>9.3f}{r['bytes']:>13,}"
            f"{r['bytes'] / base['bytes']:>9.3f}{plan or 0:>12,}{ratio:>10}{r['seconds']:>9.1f}"
            + (f"  cuda state {r['cuda_state_bytes']:,}" if "cuda_state_bytes" in r else "")
        )


if __name__ == "__main__":
    main()
