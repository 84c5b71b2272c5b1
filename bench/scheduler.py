"""Fair vs FIFO on one synthetic trace: utilisation, share error per team, p95 wait,
preemptions, ETA error (median and p90 of |actual - estimated| start).

    .venv/bin/python bench/scheduler.py [--jobs 300] [--seed 0] [--nodes 4]

Same code as ``shunter admin sim`` (``service.sim.engine``) on a trace from
``service.sim.trace.generate`` (Philly/Helios-shaped), teams a (weight 2), b, c.
"""

from __future__ import annotations

import argparse
import time

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate
from service.sim.trace import generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=4, help="8-GPU, 64-CPU nodes")
    ap.add_argument("--interarrival", type=float, default=120.0, help="mean seconds")
    args = ap.parse_args()
    teams = {"a": SimTeam(weight=2), "b": SimTeam(), "c": SimTeam()}
    lines = generate(
        teams=list(teams), jobs=args.jobs, seed=args.seed, mean_interarrival_s=args.interarrival
    )
    jobs = [SimJob(**line) for line in lines]
    nodes = [{"gpus": 8, "cpus": 64}] * args.nodes
    print(f"trace: {len(jobs)} jobs (seed {args.seed}), {args.nodes} x 8 GPUs, teams a:2 b:1 c:1")
    cols = ("util", "p95 wait s", "preempt", "ETA med s", "ETA p90 s")
    print(f"{'policy':8} " + " ".join(f"{c:>11}" for c in cols) + "  share error a/b/c")
    for policy in ("fair", "fifo"):
        t0 = time.process_time()
        s = simulate(nodes=nodes, teams=teams, jobs=jobs, cfg=SimConfig(policy=policy))["summary"]
        err = "/".join(f"{s['teams'][t]['share_error']}" for t in teams)
        eta = s["eta_error_s"]
        row = (s["utilisation"], s["p95_wait_s"], s["preemptions"], eta["median"], eta["p90"])
        cpu = time.process_time() - t0
        print(f"{policy:8} " + " ".join(f"{v!s:>11}" for v in row) + f"  {err}  ({cpu:.1f} s CPU)")


if __name__ == "__main__":
    main()
