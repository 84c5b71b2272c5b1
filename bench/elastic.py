"""Elastic vs rigid jobs on contended day traces (issue 30, item 2): the same trace replayed
twice by the simulator (fair policy), once with every multi-GPU job a rigid data-parallel
gang of 1-GPU workers, once with each of them elastic ``{min: ceil(n/2), max: n}``
(``trace.data_parallel``; its bound scaled by n / min). Prints per trace the utilisation
while jobs wait, the median wait (first start - submit, every job), the ratio elastic /
rigid of that median (the bar: <= 0.70, with utilisation >= the rigid run's), preemptions
and resizes.

    .venv/bin/python bench/elastic.py [--traces contended:1,contended:2,busy:0] [--hours 6]

Traces: ``contended`` (``trace.generate_contended``, teams a:1 b:2 c:1 at 1.5x the cluster,
4 x 8 GPUs) and ``busy`` (``trace.generate_busy``: issue #19's day, same teams).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate
from service.sim.trace import data_parallel, generate_busy, generate_contended

WEIGHTS = {"a": 1.0, "b": 2.0, "c": 1.0}
NODES = [{"gpus": 8, "cpus": 64}] * 4


def _lines(kind: str, seed: int, hours: float) -> list[dict[str, Any]]:
    if kind == "contended":
        return generate_contended(weights=WEIGHTS, hours=hours, seed=seed, cluster_gpus=32)
    if kind == "busy":
        return generate_busy(weights=WEIGHTS, hours=hours, seed=seed)
    raise SystemExit(f"unknown trace kind {kind!r}: contended | busy")


def replay(lines: list[dict[str, Any]], *, elastic: bool) -> dict[str, Any]:
    """One replay: utilisation, median wait, preemptions, resizes, CPU seconds."""
    jobs = [SimJob(**x) for x in data_parallel(lines, elastic=elastic)]
    teams = {t: SimTeam(weight=w) for t, w in WEIGHTS.items()}
    t0 = time.process_time()
    r = simulate(nodes=NODES, teams=teams, jobs=jobs, cfg=SimConfig(eta=False))
    s = r["summary"]
    waits = [j["runs"][0][0] - j["submit_s"] for j in r["jobs"] if j["runs"]]
    return {
        "jobs": len(jobs),
        "utilisation": s["utilisation"],
        "median_wait_s": statistics.median(waits),
        "preemptions": s["preemptions"],
        "resizes": s.get("resizes", 0),
        "worst_share_error": max((t["share_error"] or 0.0) for t in s["teams"].values()),
        "cpu_s": time.process_time() - t0,
    }


def _util(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="contended:1,contended:2,contended:3,busy:0")
    ap.add_argument("--hours", type=float, default=6.0)
    args = ap.parse_args()
    print(
        "trace          jobs | rigid: util  wait-s  preempt | elastic: util  wait-s  "
        "preempt resizes | wait ratio  bars"
    )
    for spec in args.traces.split(","):
        kind, _, seed = spec.partition(":")
        lines = _lines(kind, int(seed or 0), args.hours)
        rigid, elastic = replay(lines, elastic=False), replay(lines, elastic=True)
        ratio = elastic["median_wait_s"] / max(rigid["median_wait_s"], 1e-9)
        # Utilisation is measured while jobs wait: None when none ever waited (a short trace).
        util_r, util_e = rigid["utilisation"], elastic["utilisation"]
        ok = ratio <= 0.70 and (util_r is None or (util_e is not None and util_e >= util_r))
        print(
            f"{spec:14} {rigid['jobs']:4} | {_util(util_r):>10} "
            f"{rigid['median_wait_s']:7.0f} {rigid['preemptions']:8} | "
            f"{_util(util_e):>12} {elastic['median_wait_s']:7.0f} "
            f"{elastic['preemptions']:8} {elastic['resizes']:7} | {ratio:10.3f}  "
            f"{'met' if ok else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
