"""Tokens/s and peak RSS per parallel strategy: a small Llama on 2 CPU processes (gloo).

Each strategy runs in its own fresh process group (so peak RSS is its own), for a fixed
number of optimizer steps on the same global batch, with the first steps untimed (warm-up).
The single-process run of the same global batch is the baseline; "vs 1 proc" is the
throughput ratio (2.0 would be perfect scaling on 2 cores). The loss column is the last
step's loss: every strategy must print the same one (the equivalence the tests pin).

    python bench/strategies.py                 # all strategies, default size
    python bench/strategies.py --steps 6 --strategies ddp fsdp tp

Numbers on a shared 2-core machine are noisy and inflated by whatever else runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.trainer_core.test_strategies_harness import Job, spawn  # noqa: E402
from trainer_core.parallel import ParallelConfig  # noqa: E402

STRATEGIES: dict[str, tuple[int, ParallelConfig]] = {
    "single": (1, ParallelConfig()),
    "ddp": (2, ParallelConfig(strategy="ddp")),
    "fsdp": (2, ParallelConfig(strategy="fsdp")),
    "fsdp-shard_grad_op": (2, ParallelConfig(strategy="fsdp", fsdp_sharding="shard_grad_op")),
    "fsdp-no_shard": (2, ParallelConfig(strategy="fsdp", fsdp_sharding="no_shard")),
    "deepspeed-zero1": (2, ParallelConfig(strategy="deepspeed", deepspeed_stage=1)),
    "deepspeed-zero2": (2, ParallelConfig(strategy="deepspeed", deepspeed_stage=2)),
    "deepspeed-zero3": (2, ParallelConfig(strategy="deepspeed", deepspeed_stage=3)),
    "tp": (2, ParallelConfig(strategy="tp", tensor_parallel_size=2)),
}


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", nargs="*", default=list(STRATEGIES), choices=list(STRATEGIES))
    p.add_argument("--steps", type=int, default=8, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--global-batch", type=int, default=16)
    return p.parse_args()


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    overrides = {
        "vocab_size": 4096,
        "hidden_size": args.hidden,
        "intermediate_size": 4 * args.hidden,
        "num_hidden_layers": args.layers,
        "num_attention_heads": max(2, args.hidden // 64),
        "num_key_value_heads": max(2, args.hidden // 64),
        "max_position_embeddings": args.seq_len,
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.strategies:
            world, cfg = STRATEGIES[name]
            job = Job(
                name=name,
                cfg=cfg,
                first=1,
                last=args.warmup + args.steps,
                timed_from=args.warmup + 1,
                model_overrides=overrides,
                global_batch=args.global_batch,
                seq_len=args.seq_len,
            )
            result = spawn(world, [job], Path(tmp))
            r = result[name]
            # Every rank processed tokens_per_rank x dp ranks; TP ranks share one batch.
            tokens = args.global_batch * args.seq_len * args.steps
            rows.append(
                {
                    "strategy": name,
                    "procs": world,
                    "tokens_per_s": tokens / r["seconds"],
                    "peak_rss_mb": max(result["_peak_rss_mb"]),
                    "loss": r["losses"][-1],
                }
            )
            print(f"  done {name}: {rows[-1]['tokens_per_s']:.0f} tok/s", file=sys.stderr)
    return rows


def main() -> None:
    args = _args()
    rows = run(args)
    base = next((r["tokens_per_s"] for r in rows if r["strategy"] == "single"), None)
    print(
        f"\nLlama hidden={args.hidden} layers={args.layers} seq={args.seq_len} global_batch="
        f"{args.global_batch} steps={args.steps} (+{args.warmup} warm-up), CPU gloo"
    )
    header = ("strategy", "procs", "tokens/s", "vs 1 proc", "peak RSS MB", "loss")
    print(f"{header[0]:<22}" + "".join(f"{h:>12}" for h in header[1:]))
    for r in rows:
        ratio = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
        print(f"{r['strategy']:<22}{r['procs']:>12}{r['tokens_per_s']:>12.0f}{ratio:>12}"
              f"{r['peak_rss_mb']:>12}{r['loss']:>12.5f}")  # fmt: skip


if __name__ == "__main__":
    main()
