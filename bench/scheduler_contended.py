"""Fair vs FIFO on generated contended traces (``trace.generate_contended``): 2-4 teams of
random weights 1-4 on 4-6 nodes, every team with work queued for hours. Per trace: the worst
team's share error over contended time, utilisation, preemptions and the longest gang wait;
then how many traces meet the issue's bars (share error <= 0.10, utilisation >= 0.95 x FIFO).

    .venv/bin/python bench/scheduler_contended.py [--traces 12] [--seed 42] [--hours 6]
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate
from service.sim.trace import generate_contended


def _row(result: dict[str, Any], gangs: set[str]) -> tuple[float, float, int, float]:
    s = result["summary"]
    worst = max((t["share_error"] or 0.0) for t in s["teams"].values())
    waits = [j["runs"][0][0] - j["submit_s"] for j in result["jobs"] if j["id"] in gangs]
    return s["utilisation"], worst, s["preemptions"], max(waits, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=12)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--hours", type=float, default=6.0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    met = 0
    worst_all = 0.0
    print("trace weights            nodes  fair: util  err  preempt gang-wait-s | fifo: util  err")
    for k in range(args.traces):
        weights = {
            "abcd"[i]: float(rng.choice([1, 1, 2, 3, 4])) for i in range(rng.choice([2, 3, 4]))
        }
        nodes = rng.choice([4, 5, 6])
        lines = generate_contended(
            weights=weights, hours=args.hours, seed=args.seed * 1000 + k, cluster_gpus=8 * nodes
        )
        jobs = [SimJob(**line) for line in lines]
        gangs = {j.id for j in jobs if j.num_workers > 1}
        teams = {t: SimTeam(weight=w) for t, w in weights.items()}
        cluster = [{"gpus": 8, "cpus": 64}] * nodes
        fair, fifo = (
            _row(
                simulate(nodes=cluster, teams=teams, jobs=jobs, cfg=SimConfig(policy=p, eta=False)),
                gangs,
            )
            for p in ("fair", "fifo")
        )
        ok = fair[1] <= 0.10 and fair[0] >= 0.95 * fifo[0]
        met += ok
        worst_all = max(worst_all, fair[1])
        w = ":".join(f"{x:g}" for x in weights.values())
        print(
            f"{k:5} {w:18} {nodes:5}  {fair[0]:10.3f} {fair[1]:5.3f} {fair[2]:7} {fair[3]:11.0f}"
            f" | {fifo[0]:10.3f} {fifo[1]:5.3f}  {'ok' if ok else 'MISSED'}"
        )
    print(f"bars met on {met}/{args.traces} traces; worst share error {worst_all:.3f}")


if __name__ == "__main__":
    main()
