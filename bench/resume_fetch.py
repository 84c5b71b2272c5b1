"""What a node downloads from the bucket to resume: only what its ranks read, against the
whole checkpoint (what every node downloaded before).

Per strategy, CPU ranks (gloo) train a small Llama 2 steps, save, and the checkpoint goes to
a local S3 server (moto) with its manifest (4 MiB blocks), as a job's does. Then 2 ranks
resume it, one per node, two ways in the same run:

- before: each node downloads the whole checkpoint (``storage.download_dir``, what
  ``worker.staging.localize`` did; timed here once, one node's cost) and loads it from disk;
- after: each rank loads from the bucket through its own node's cache
  (``worker.staging.localize`` + ``cached``), fetching the blocks its load reads.

Printed per strategy and node: bytes fetched, the ratio to the whole checkpoint, and load
seconds (before: download + load; after: load with its fetches). Both resumes must give the
same next-step loss. ``fsdp-4to2``: saved by 4 ranks (FSDP+TP 2x2), resumed by 2 (FSDP).

    python bench/resume_fetch.py                          # fsdp, zero3, ddp, fsdp-4to2
    python bench/resume_fetch.py --strategies fsdp --quick

Times on a shared 2-core machine with an in-process Python S3 server are noisy; the bytes
are exact.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import storage  # noqa: E402
from tests.s3_server import aws_env, running_s3  # noqa: E402
from tests.trainer_core.test_strategies_harness import Job, spawn  # noqa: E402
from trainer_core.parallel import ParallelConfig  # noqa: E402

FSDP = ParallelConfig(strategy="fsdp")
ZERO3 = ParallelConfig(strategy="deepspeed", deepspeed_stage=3)
DDP = ParallelConfig(strategy="ddp")
# name -> (ranks that save, config that saves, config that resumes on 2 ranks)
STRATEGIES: dict[str, tuple[int, ParallelConfig, ParallelConfig]] = {
    "fsdp": (2, FSDP, FSDP),
    "zero3": (2, ZERO3, ZERO3),
    "ddp": (2, DDP, DDP),
    "fsdp-4to2": (4, ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2), FSDP),
}
MB = 1e6


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", nargs="*", default=list(STRATEGIES), choices=list(STRATEGIES))
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--block-kib", type=int, default=4096, help="manifest block size")
    p.add_argument("--quick", action="store_true", help="a tiny model and 4 KiB blocks")
    args = p.parse_args()
    if args.quick:
        args.hidden, args.layers, args.vocab, args.block_kib = 32, 1, 128, 4
    return args


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "vocab_size": args.vocab,
        "hidden_size": args.hidden,
        "intermediate_size": 4 * args.hidden,
        "num_hidden_layers": args.layers,
        "num_attention_heads": max(2, args.hidden // 64),
        "num_key_value_heads": max(2, args.hidden // 64),
    }


def measure(name: str, args: argparse.Namespace, bucket: str, tmp: Path) -> list[dict[str, Any]]:
    world, save_cfg, resume_cfg = STRATEGIES[name]
    model = _overrides(args)
    uri = f"{bucket}/{name}/checkpoint-2"
    save = Job(
        name=f"save-{name}",
        cfg=save_cfg,
        last=2,
        save_after=2,
        save_dir=str(tmp / f"saved-{name}"),
        upload_to=uri,
        block_size=args.block_kib * 1024,
        model_overrides=model,
    )
    spawn(world, [save], tmp)
    whole = sum(size for _, size in storage.list_files(uri))
    start = time.perf_counter()  # before: one node's whole download
    local = storage.download_dir(uri, tmp / f"old-{name}" / "checkpoint-2")
    download_s = time.perf_counter() - start
    before = Job(
        name="before", cfg=resume_cfg, first=3, last=3, load_from=str(local), model_overrides=model
    )
    after = Job(
        name="after",
        cfg=resume_cfg,
        first=3,
        last=3,
        load_from=uri,
        load_via=str(tmp / f"new-{name}" / "node{rank}"),
        model_overrides=model,
    )
    got = spawn(2, [before, after], tmp)
    if got["before"]["losses"] != got["after"]["losses"]:
        raise SystemExit(f"{name}: the two resumes differ: {got['before']} {got['after']}")
    rows = []
    for rank, fetched in enumerate(got["after"]["fetched"]):
        rows.append(
            {
                "strategy": name,
                "node": f"rank {rank}",
                "whole_mb": whole / MB,
                "fetched_mb": sum(fetched.values()) / MB,
                "before_s": download_s + got["before"]["load_s"][rank],
                "after_s": got["after"]["load_s"][rank],
            }
        )
    return rows


def main() -> None:
    args = _args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, running_s3() as s3, aws_env(s3.env):
        bucket = "s3://" + s3.bucket("bench-" + secrets.token_hex(4))
        for name in args.strategies:
            rows += measure(name, args, bucket, Path(tmp))
            print(f"  done {name}", file=sys.stderr)
    print(
        f"\nLlama hidden={args.hidden} layers={args.layers} vocab={args.vocab}, AdamW, "
        f"{args.block_kib} KiB blocks, 2 resuming ranks on 2 nodes, CPU gloo, moto S3"
    )
    header = ("strategy", "node", "whole MB", "fetched MB", "ratio", "before s", "after s")
    print(f"{header[0]:<12}{header[1]:<8}" + "".join(f"{h:>12}" for h in header[2:]))
    for r in rows:
        ratio = r["fetched_mb"] / r["whole_mb"]
        print(f"{r['strategy']:<12}{r['node']:<8}{r['whole_mb']:>12.1f}{r['fetched_mb']:>12.1f}"
              f"{ratio:>12.2f}{r['before_s']:>12.2f}{r['after_s']:>12.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
