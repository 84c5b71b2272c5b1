"""Where a day's idle GPUs go while jobs wait (issue 30's ETAs): a work-conserving ETA
forward run predicts no idling, so idling in the replay is what it cannot see.

One day replayed as ``bench/eta_calibration.py`` does (fair policy, 4 x 8 GPUs; ETAs off:
they do not change decisions). Over every interval in which some job waits, the GPUs not
held are summed (GPU-seconds), split by what the policy's last plan before the interval
held a reservation for (the first blocked job's GPUs, or none) and by the 6 h slice of the
replay it falls in (hours past the trace's last submit drain the queue: no first estimate
is made there once nothing is submitted). Printed as fractions of the capacity over the
replay, the largest first, with the utilisation.

    .venv/bin/python bench/eta_idle.py [--trace mixed:5] [--hours 24] [--top 12] [--root DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="mixed:5", help="kind:seed (eta_calibration's kinds)")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--top", type=int, default=12, help="rows printed")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    sys.path.insert(0, str(Path(args.root) / "bench"))
    from eta_calibration import NODES, _trace

    import service.sim.engine as engine

    kind, _, seed = args.trace.partition(":")
    weights, lines = _trace(kind, int(seed or 0), args.hours)
    teams = {t: engine.SimTeam(weight=w) for t, w in weights.items()}
    jobs = [engine.SimJob(**line) for line in lines]
    sim = engine._Sim(NODES, teams, jobs, engine.SimConfig(eta=False))
    # (the number of intervals recorded when a plan was made, what it reserved for)
    plans: list[tuple[int, str]] = []
    planned = engine.plan

    def recording(*a: Any, **k: Any) -> Any:
        p = planned(*a, **k)
        r = p.reservation
        plans.append((len(sim.intervals), "none" if r is None else f"{r.entry.gpus:g} GPUs"))
        return p

    engine.plan = recording  # type: ignore[attr-defined]
    c0 = time.process_time()
    sim.run()
    cpu = time.process_time() - c0
    total = sum(float(n["gpus"]) for n in NODES)
    last_submit = max(j.submit_s for j in jobs)
    idle: Counter[tuple[str, str]] = Counter()
    capacity = idle_all = 0.0
    at = 0
    for k, iv in enumerate(sim.intervals):
        while at + 1 < len(plans) and plans[at + 1][0] <= k:
            at += 1
        dt = iv.end_s - iv.start_s
        free = max(total - sum(g for _, g in iv.held.values()), 0.0)
        capacity += total * dt
        idle_all += free * dt
        if iv.waiting and free > 1e-9:
            h = int(iv.start_s // 21600) * 6
            after = " (after the last submit)" if h >= last_submit / 3600 else ""
            when = f"h {h:02d}-{h + 6:02d}{after}"
            idle[(plans[at][1] if plans and plans[at][0] <= k else "none", when)] += free * dt
    util = sim.result()["summary"]["utilisation"]
    waiting = sum(idle.values())
    print(
        f"{args.trace} {args.hours:g} h: utilisation {util}, idle {idle_all / capacity:.3f} of "
        f"capacity, idle while waiting {waiting / capacity:.3f} ({cpu:.1f} s CPU)"
    )
    print("  reservation for | 6 h slice | idle GPU-s / capacity")
    for (res, when), v in idle.most_common(args.top):
        print(f"  {res} | {when} | {v / capacity:.3f}")


if __name__ == "__main__":
    main()
