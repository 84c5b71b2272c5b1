"""Cost of the per-rank step timing (``trainer_core.step_timing``) against the same loop
without it, measured in the same run.

Two gloo processes train a small DDP MLP on CPU for ``--steps`` steps, twice: baseline (no
timer) and timed (``StepTimer.step``/``compute`` around every step and forward, and
``window_end`` every ``--logging-steps`` steps, whose gather runs every ``--window`` steps).
The order alternates over ``--rounds`` rounds so load drifts hit both. Reported: the median
per-step milliseconds of each, their ratio (timed / baseline), and the median seconds of one
window's gather (the only collective the timing adds).

    python bench/step_timing.py [--steps 300] [--rounds 3] [--window 50] [--hidden 256]

On a shared, loaded machine the ratio's noise is a few percent either way; say so.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shunter.jobspec.spec import StragglerSpec  # noqa: E402
from trainer_core.step_timing import StepTimer  # noqa: E402


def _loop(
    model: nn.Module, opt: torch.optim.Optimizer, args: argparse.Namespace, timed: bool
) -> tuple[float, list[float]]:
    timer = StepTimer(
        StragglerSpec(enabled=timed, window_steps=args.window),
        logging_steps=args.logging_steps,
        device=torch.device("cpu"),
    )
    x = torch.randn(args.batch, args.hidden)
    gathers: list[float] = []
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        with timer.step():
            with timer.compute():
                loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if step % args.logging_steps == 0:
            g0 = time.perf_counter()
            got = timer.window_end({"step_time_s": 0.001, "samples_per_s": 1.0})
            if got:
                gathers.append(time.perf_counter() - g0)
    dist.barrier()
    return (time.perf_counter() - t0) / args.steps, gathers


def _worker(rank: int, world: int, init: str, args: argparse.Namespace, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    rows = []
    for r in range(args.rounds):
        for timed in (r % 2 == 1, r % 2 == 0):  # alternate which goes first
            per_step, gathers = _loop(model, opt, args, timed)
            rows.append((timed, per_step, gathers))
    if rank == 0:
        with open(out, "w") as fh:
            for timed, per_step, gathers in rows:
                fh.write(f"{int(timed)} {per_step} {' '.join(map(str, gathers))}\n")
    dist.barrier()
    del model, opt
    dist.destroy_process_group()
    # No interpreter teardown: torch 2.13's static destructors abort about one exit in six
    # ("terminate called without an active exception") after a gloo group, even a destroyed one
    # (as in tests/trainer_core/test_strategies_harness.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--window", type=int, default=50)
    p.add_argument("--logging-steps", type=int, default=10)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.txt")
        init = f"tcp://127.0.0.1:{_free_port()}"
        mp.spawn(_worker, args=(2, init, args, out), nprocs=2, join=True)
        lines = Path(out).read_text().splitlines()
    base, timed, gathers = [], [], []
    for line in lines:
        parts = line.split()
        (timed if parts[0] == "1" else base).append(float(parts[1]))
        gathers += [float(g) for g in parts[2:]]
    b, t = statistics.median(base), statistics.median(timed)
    print(f"{'run':<10}{'ms/step (median of rounds)':>28}")
    print(f"{'baseline':<10}{b * 1000:>28.3f}")
    print(f"{'timed':<10}{t * 1000:>28.3f}")
    print(f"ratio timed/baseline: {t / b:.3f}")
    if gathers:
        print(f"window gather: median {statistics.median(gathers) * 1000:.3f} ms, n={len(gathers)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
