"""One day's replay with ETAs (fair policy, 4 x 8 GPUs, as ``bench/eta_calibration.py``):
its CPU and wall seconds, and a digest of what it decided and estimated, to check that a
change made the replay cheaper without changing any decision or ETA.

Printed: ``jobs`` (sha1 of every job's runs, preemptions and first estimates), ``summary``
(sha1 of the summary less its decision times) and ``etas`` (sha1 of every
``estimate_ranges`` output of the run, in order: every estimate, not only the first).
Compare two trees by running each (``--root``: a checkout, e.g. ``git archive <commit>
service shunter bench | tar -x -C /tmp/old``):

    .venv/bin/python bench/replay_digest.py [--trace busy:0] [--hours 24] [--root DIR]

``--typed``: the same trace on a mixed cluster (2 A100-40GB and 2 H100 nodes of 8 GPUs) where
team a's jobs ask for A100s only and the others' for any type; ``--type-weights h100=2``: the
weights of the fair shares per type (issue 30). Also printed then: each team's GPU-hours per
type, its median wait and its share error (over the dominant shares per type, and over
pooled GPU-seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="busy:0", help="kind:seed (eta_calibration's kinds)")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--typed", action="store_true", help="a mixed A100/H100 cluster")
    ap.add_argument("--type-weights", default="", help="e.g. h100=2 (with --typed)")
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    sys.path.insert(0, str(Path(args.root) / "bench"))
    from eta_calibration import NODES, _trace

    import service.sim.engine as engine

    etas = hashlib.sha1()
    estimate = engine.estimate_ranges  # type: ignore[attr-defined]

    def digested(*a, **k):  # type: ignore[no-untyped-def]
        out = estimate(*a, **k)
        for i in sorted(out):
            etas.update(f"{i}|{out[i]}".encode())
        return out

    engine.estimate_ranges = digested  # type: ignore[attr-defined]
    kind, _, seed = args.trace.partition(":")
    weights, lines = _trace(kind, int(seed or 0), args.hours)
    teams = {t: engine.SimTeam(weight=w) for t, w in weights.items()}
    jobs = [engine.SimJob(**line) for line in lines]
    nodes, cfg = NODES, engine.SimConfig()
    if args.typed:
        nodes = [{**n, "accelerator": "a100-40g" if i < 2 else "h100"} for i, n in enumerate(NODES)]
        jobs = [j if j.team != "a" else replace(j, accelerators=("a100-40g",)) for j in jobs]
        if args.type_weights:
            w = dict(kv.split("=") for kv in args.type_weights.split(","))
            cfg = replace(cfg, type_weights={k: float(v) for k, v in w.items()})
    c0, t0 = time.process_time(), time.perf_counter()
    r = engine.simulate(nodes=nodes, teams=teams, jobs=jobs, cfg=cfg)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    summary = {k: v for k, v in r["summary"].items() if k != "decision_s"}

    def sha(x: object) -> str:
        return hashlib.sha1(json.dumps(x, sort_keys=True, default=str).encode()).hexdigest()[:12]

    print(
        f"{args.trace} {args.hours:g} h: cpu {cpu:.1f} s, wall {wall:.1f} s; jobs {sha(r['jobs'])} "
        f"summary {sha(summary)} etas {etas.hexdigest()[:12]}; eta {r['summary']['eta']}"
    )
    if args.typed:
        _per_team(r, {j.id: j.num_workers * j.gpus_per_worker for j in jobs})


def _per_team(r: dict, gpus_of: dict[str, float]) -> None:  # type: ignore[type-arg]
    """Each team's GPU-hours per type and median wait (first start - submit)."""
    hours: dict[str, dict[str, float]] = {}
    waits: dict[str, list[float]] = {}
    for j in r["jobs"]:
        team = j["team"]
        for (a, b), t in zip(j["runs"], j["accelerators"], strict=True):
            per = hours.setdefault(team, {})
            per[t] = per.get(t, 0.0) + (b - a) * gpus_of[j["id"]] / 3600
        if j["runs"]:
            waits.setdefault(team, []).append(j["runs"][0][0] - j["submit_s"])
    rows = r["summary"]["teams"]
    for team in sorted(hours):
        per = ", ".join(f"{t} {h:.0f}" for t, h in sorted(hours[team].items()))
        row = rows[team]
        print(
            f"  team {team}: GPU-h {per}; median wait {statistics.median(waits[team]):.0f} s; "
            f"share error {row['share_error']} (pooled GPU-s {row.get('share_error_pooled')})"
        )


if __name__ == "__main__":
    main()
