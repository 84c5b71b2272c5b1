"""Streaming under a small cache: a large text dataset trains with each node's cache capped,
is preempted mid-epoch, and its loss after the resume equals an uninterrupted run's.

A store (a local directory; ``--s3``: a local moto S3 server) holds the dataset as a team
object (``objects/<digest>/``, manifest last, as ``POST /v1/datasets`` stores it): tiny
Shakespeare (``../shared/data``, else ``examples/data``) repeated, each copy's lines rotated,
to ``--mb`` megabytes. Three jobs then run, each in its own process with its own empty node
cache (a fresh node with a private disk) capped at ``--cap-mb``, training a tiny Llama over
the MiniLM tokenizer through ``trainer_core.train`` with the worker's ``NodeInputs``:

1. ``straight``: ``--steps`` steps uninterrupted. Being first, it tokenises the dataset into
   shards in the store (``trainer_core.streaming``, streamed: never whole on the node);
2. ``preempted``: the same job, stopped by a checkpoint-now request (what a preemption sends)
   after ``--stop-at`` steps: it saves a checkpoint mid-epoch and exits;
3. ``resumed``: a new process on another fresh node resumes from that checkpoint and trains
   to ``--steps``.

Printed: the dataset's and the shards' sizes, the seconds spent tokenising, for each job the
most bytes its node cache held (checked after every fetch: the only time it grows) against the
cap and the bytes it fetched, and whether the loss of every step of preempted+resumed equals
the straight run's (exactly, and the largest difference).

    python bench/streaming.py                   # ~1 GB, cap 200 MB, 40 steps, stop at 20
    python bench/streaming.py --quick           # a small corpus and cap: a smoke run
    python bench/streaming.py --mb 40 --cap-mb 8 --shard-kb 128   # the same ratios, smaller

Tokenising is the cost: MiniLM's tokenizer takes about 3.4 s of one core per MB of text here,
so the 1 GB default needs about an hour of CPU on one core (once: later jobs read the shards).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

SHAKESPEARE = [
    REPO / ".." / "shared" / "data" / "tinyshakespeare" / "input.txt",
    REPO / "examples" / "data" / "tinyshakespeare" / "input.txt",
]
MB = 1e6


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=1000.0, help="dataset size in MB")
    p.add_argument("--cap-mb", type=float, default=200.0, help="each node's cache cap in MB")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--stop-at", type=int, default=20, help="the preemption: after this step")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--shard-kb", type=int, help="target shard size (default 4 MiB)")
    p.add_argument("--window", type=int, help="shards shuffled together (default 8)")
    p.add_argument("--s3", action="store_true", help="a local moto S3 store (slower)")
    p.add_argument("--quick", action="store_true", help="0.3 MB, cap 48 KB, 12 steps")
    p.add_argument("--job", help=argparse.SUPPRESS)  # a child: the job's JSON description
    args = p.parse_args(argv)
    if args.quick:
        args.mb, args.cap_mb, args.steps, args.stop_at = 0.3, 0.048, 12, 6
        args.max_length, args.batch = 32, 4
        args.shard_kb, args.window = args.shard_kb or 2, args.window or 2
    return args


def _corpus(path: Path, size: int) -> None:
    """``size`` bytes (about) of text: tiny Shakespeare copies, each copy's lines rotated by a
    seeded offset, written a copy at a time."""
    text = next((p.read_text() for p in SHAKESPEARE if p.is_file()), None)
    if text is None:
        raise SystemExit("no tinyshakespeare under ../shared/data or examples/data")
    lines = text.splitlines(keepends=True)
    rng = random.Random(0)
    written = 0
    with open(path, "w") as out:
        while written < size:
            cut = rng.randrange(len(lines))
            chunk = "".join(lines[cut:] + lines[:cut])
            chunk = chunk[: size - written] if size - written < len(chunk) else chunk
            out.write(chunk)
            written += len(chunk)


# ---------------------------------------------------------------- a job (child process)


def _job(desc: dict[str, Any]) -> dict[str, Any]:
    from trainer_core import JsonlReporter, TrainConfig, train
    from trainer_core import streaming as streaming_mod
    from worker.inputs import NodeInputs, tokenized_root
    from worker.object_cache import ObjectCache

    class Watched(ObjectCache):
        """Records the most bytes held (after each fetch) and the fetches."""

        max_bytes = 0

        def get(self, key: str, source: Any) -> Path:
            out = super().get(key, source)
            self.max_bytes = max(self.max_bytes, sum(self.usage().values()))
            return out

    class Preempting(JsonlReporter):
        """A checkpoint-now request (as a preemption sends) once ``stop_at`` steps are done."""

        def __init__(self, out: Path, stop_at: int | None) -> None:
            super().__init__(out)
            self.stop_at, self.asked = stop_at, 0

        def stop_requested(self) -> str | None:
            self.asked += 1  # once after every step, before its checkpoint
            if self.stop_at is not None and self.asked >= self.stop_at:
                return "preempted"
            return None

    tokenise_s: list[float] = []
    real = streaming_mod.tokenize_to_shards

    def timed(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real(*a, **kw)
        finally:
            tokenise_s.append(time.perf_counter() - t0)

    streaming_mod.tokenize_to_shards = timed
    cache = Watched(Path(desc["node"]), limit_bytes=desc["cap"])
    node = NodeInputs(cache, tokenized=tokenized_root(desc["root"]))
    out = Path(desc["out"])
    spec = {
        "model": {
            "tokenizer": desc["tokenizer"],
            "task": "causal-lm",
            "from_scratch": True,
            "config_overrides": {
                "model_type": "llama",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "max_position_embeddings": desc["max_length"],
                "attention_dropout": 0.1,
            },
        },
        "data": {
            "train": node.dataset("ds-bench", desc["inputs"]["ds-bench"]),
            "max_length": desc["max_length"],
            "packing": True,
        },
        "training": {
            "output_dir": str(out),
            "max_steps": desc["steps"],
            "per_device_train_batch_size": desc["batch"],
            "learning_rate": 1e-3,
            "logging_steps": 1,
            "save_strategy": "no",
            "seed": 7,
        },
        "distributed": {"strategy": "ddp"},
    }
    metrics = out / "metrics.jsonl"
    seen = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    start = time.perf_counter()
    result = train(TrainConfig.from_spec(spec, shared_data=node), Preempting(out, desc["stop_at"]))
    losses = {}
    for line in metrics.read_text().splitlines()[seen:]:  # this process's steps
        record = json.loads(line)
        if "loss" in record:
            losses[int(record["step"])] = float(record["loss"])
    return {
        "wall_s": time.perf_counter() - start,
        "tokenise_s": sum(tokenise_s),
        "max_cache": cache.max_bytes,
        "fetched": cache.fetched_bytes,
        "losses": losses,
        "interrupted": bool(getattr(result, "interrupted", None)),
    }


# ---------------------------------------------------------------- the bench


def _child(desc: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--job", json.dumps(desc)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=7200,
    )
    if done.returncode != 0:
        raise SystemExit(f"job failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line.removeprefix("RESULT "))
    got["losses"] = {int(k): v for k, v in got["losses"].items()}
    return dict(got)


def main() -> None:
    args = _args()
    if args.job:
        print("RESULT " + json.dumps(_job(json.loads(args.job))), flush=True)
        return
    import storage
    from storage.manifest import publish_object
    from tests.trainer_core.tc_helpers import MINILM
    from trainer_core.streaming import SHARD_BYTES_ENV, WINDOW_ENV

    if args.shard_kb:
        os.environ[SHARD_BYTES_ENV] = str(args.shard_kb * 1024)
    if args.window:
        os.environ[WINDOW_ENV] = str(args.window)
    cap = int(args.cap_mb * MB)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-stream-")))
        if args.s3:
            from tests.s3_server import aws_env, running_s3

            s3 = stack.enter_context(running_s3())
            stack.enter_context(aws_env(s3.env))
            root = f"s3://{s3.bucket('bench-' + secrets.token_hex(4))}/shunter"
        else:
            root = str(tmp / "store")
        src = tmp / "upload"
        src.mkdir()
        t0 = time.perf_counter()
        _corpus(src / "train.txt", int(args.mb * MB))
        size = (src / "train.txt").stat().st_size
        digest, _ = publish_object(src, root)
        shutil.rmtree(src)
        upload_s = time.perf_counter() - t0
        inputs = {
            "ds-bench": {
                "uri": storage.join(root, storage.object_dir(digest)),
                "digest": digest,
                "kind": "dataset",
                "format": "text",
                "file": "train.txt",
            }
        }
        base = {
            "root": root,
            "inputs": inputs,
            "tokenizer": MINILM,
            "cap": cap,
            "steps": args.steps,
            "max_length": args.max_length,
            "batch": args.batch,
        }
        run_dir = tmp / "preempted-run"
        jobs = {
            "straight": {**base, "node": str(tmp / "node-a"), "out": str(tmp / "straight")},
            "preempted": {
                **base,
                "node": str(tmp / "node-b"),
                "out": str(run_dir),
                "stop_at": args.stop_at,
            },
            "resumed": {**base, "node": str(tmp / "node-c"), "out": str(run_dir)},
        }
        results = {}
        for name, desc in jobs.items():
            desc.setdefault("stop_at", None)
            results[name] = _child(desc)
            print(f"{name}: done in {results[name]['wall_s']:.1f}s", flush=True)
        shards = [(p, s) for p, s in storage.list_files(storage.join(root, ".cache/tokenized"))]
        shard_bytes = sum(s for p, s in shards if "shard-" in p)
        shard_count = sum(1 for p, _ in shards if "shard-" in p)
    print(f"dataset: {size / MB:.1f} MB of text (written and stored in {upload_s:.1f}s)")
    print(f"shards: {shard_count} files, {shard_bytes / MB:.1f} MB tokenised (packed)")
    print(f"tokenising (streamed, first job): {results['straight']['tokenise_s']:.1f}s")
    print(
        f"node cache cap: {cap / MB:.3f} MB each; shard target {args.shard_kb or 4096} KB, "
        f"window {args.window or 8}"
    )
    print(f"{'job':10} {'steps':>5} {'max cache MB':>12} {'under cap':>9} {'fetched MB':>10}")
    for name, r in results.items():
        steps = sorted(r["losses"])
        span = f"{steps[0]}-{steps[-1]}" if steps else "-"
        print(
            f"{name:10} {span:>5} {r['max_cache'] / MB:12.3f} "
            f"{'yes' if r['max_cache'] <= cap else 'NO':>9} {r['fetched'] / MB:10.3f}"
        )
    straight = results["straight"]["losses"]
    joined = {**results["preempted"]["losses"], **results["resumed"]["losses"]}
    diffs = [abs(straight[s] - joined[s]) for s in straight if s in joined]
    same = sorted(joined) == sorted(straight) and all(straight[s] == joined[s] for s in straight)
    part = results["preempted"]
    stopped = part["interrupted"] and max(part["losses"]) == args.stop_at
    print(
        f"preempted after step {args.stop_at} (checkpoint-now: {stopped}), resumed in a new "
        f"process on another node"
    )
    print(
        f"losses equal at every step: {'yes' if same else 'NO'} "
        f"({len(diffs)} steps compared, max |diff| {max(diffs) if diffs else float('nan'):.3g})"
    )
    if not same or not stopped or any(r["max_cache"] > cap for r in results.values()):
        raise SystemExit("streaming bar NOT met")


if __name__ == "__main__":
    main()
