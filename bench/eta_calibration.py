"""How right the start ETAs are (issue 30), on contended 24 h days of a 32-GPU cluster.

For each trace: the simulator (fair policy) replayed with the ETAs as they are and with
the forward run as it was before (``SimConfig(eta_legacy=True)``: every job held to its
max_runtime, no backfill, no calibration), and with FIFO for the utilisation bar. Printed:
over the jobs that waited >= 10 min, the median and p90 of |actual - first estimate| /
actual wait and the p90 range's coverage (the fraction that started by
``estimated_start_p90_s``); the worst team's share error, utilisation / FIFO's, and the
replay's wall and CPU seconds. Bars: median <= 0.25, coverage >= 0.80, share error <= 0.10,
utilisation >= 0.95 x FIFO, replay <= 30 s.

Traces: ``busy`` (``trace.generate_busy``: issue #19's day, 3 teams a:1 b:2 c:1, ~2,850
jobs), ``bursty`` (``trace.generate_bursty``: another shape, 4 teams 1:1:2:3, sweeps,
per-team limit habits, priorities, ~2,900 jobs), ``contended`` (``trace.generate_contended``:
every team submitting 1.5x its share, 3 teams 1:2:1) and ``mixed``
(``trace_mix.generate_mixed``: per-team habits drawn from the seed, heavy-tailed run times,
early crashes, priority mixes, 4 teams 1:1:2:3, ~1,500 jobs).

    .venv/bin/python bench/eta_calibration.py [--traces busy:0,bursty:0,contended:0,mixed:0]
        [--hours 24] [--no-legacy] [--no-fifo]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's code

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate
from service.sim.trace import generate_bursty, generate_busy, generate_contended
from service.sim.trace_mix import generate_mixed

NODES = [{"gpus": 8, "cpus": 64}] * 4


def _trace(kind: str, seed: int, hours: float) -> tuple[dict[str, float], list[dict[str, Any]]]:
    if kind == "busy":
        w = {"a": 1.0, "b": 2.0, "c": 1.0}
        return w, generate_busy(weights=w, hours=hours, seed=seed)
    if kind == "bursty":
        w = {"a": 1.0, "b": 1.0, "c": 2.0, "d": 3.0}
        return w, generate_bursty(weights=w, hours=hours, jobs=round(2900 * hours / 24), seed=seed)
    if kind == "contended":
        w = {"a": 1.0, "b": 2.0, "c": 1.0}
        return w, generate_contended(weights=w, hours=hours, seed=seed)
    if kind == "mixed":
        w = {"a": 1.0, "b": 1.0, "c": 2.0, "d": 3.0}
        return w, generate_mixed(weights=w, hours=hours, jobs=round(1500 * hours / 24), seed=seed)
    raise SystemExit(f"unknown trace kind {kind!r}: busy | bursty | contended | mixed")


def _run(w: dict[str, float], lines: list[dict[str, Any]], **cfg: Any) -> tuple[Any, float, float]:
    teams = {t: SimTeam(weight=x) for t, x in w.items()}
    jobs = [SimJob(**line) for line in lines]
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(nodes=NODES, teams=teams, jobs=jobs, cfg=SimConfig(**cfg))
    return r, time.perf_counter() - t0, time.process_time() - c0


def _fig(r: dict[str, Any]) -> str:
    c = r["summary"]["eta"]
    return (
        f"median {c['median_rel_error']}, p90 {c['p90_rel_error']}, "
        f"coverage {c['p90_coverage']} ({c['jobs']} jobs)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="busy:0,bursty:0", help="kind:seed,...")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--no-legacy", action="store_true", help="skip the before-run")
    ap.add_argument("--no-fifo", action="store_true", help="skip the FIFO run")
    args = ap.parse_args()
    for spec in args.traces.split(","):
        kind, _, seed = spec.partition(":")
        w, lines = _trace(kind, int(seed or 0), args.hours)
        r, wall, cpu = _run(w, lines)
        s = r["summary"]
        worst = max((t["share_error"] or 0.0) for t in s["teams"].values())
        print(f"{kind}:{seed or 0}: {len(lines)} jobs, {args.hours:g} h, 4 x 8 GPUs, weights {w}")
        print(f"  ETAs now:    {_fig(r)}")
        if not args.no_legacy:
            old, _, old_cpu = _run(w, lines, eta_legacy=True)
            print(f"  ETAs before: {_fig(old)} (replay {old_cpu:.1f} s CPU)")
            same = [(j["id"], j["runs"]) for j in old["jobs"]] == [
                (j["id"], j["runs"]) for j in r["jobs"]
            ]
            print(f"  same decisions with either ETA: {same}")
        util = f"utilisation {s['utilisation']}"
        if not args.no_fifo:
            fifo, _, _ = _run(w, lines, policy="fifo", eta=False)
            fu = fifo["summary"]["utilisation"]
            util += f" = {s['utilisation'] / fu:.3f} x FIFO's {fu}"
        print(f"  worst share error {worst:.4f}, {util}")
        print(f"  replay {wall:.1f} s wall, {cpu:.1f} s CPU (target <= 30 s)")


if __name__ == "__main__":
    main()
