"""Per-type reservations in the simulator (issue 30 item 1): on one A100 and one H100 node,
an H100 gang blocked behind a running H100 job while an A100 gang holds the first
reservation starts when the H100 node frees, not after a long H100 backfill; a short one
that ends before runs at once."""

from __future__ import annotations

from typing import Any

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate

A100, H100 = "a100-40gb", "h100-80gb"
NODES: list[dict[str, Any]] = [
    {"gpus": 8, "cpus": 64, "accelerator": A100, "gpu_memory_gb": 40},
    {"gpus": 8, "cpus": 64, "accelerator": H100, "gpu_memory_gb": 80},
]


def _job(i: str, kind: str, gpus: float, submit: float, run: float, bound: float) -> SimJob:
    return SimJob(
        id=i, team="a", submit_s=submit, num_workers=1, gpus_per_worker=gpus,
        cpus_per_worker=4.0, duration_s=run, max_runtime_s=bound, accelerators=(kind,),
        preemptible=False,
    )  # fmt: skip


def test_the_h100_reservation_is_not_delayed_by_a_backfill_on_the_h100_node() -> None:
    jobs = [
        _job("ra", A100, 8, 0, 3600, 4000),  # the A100 node, until 3600
        _job("rh", H100, 6, 0, 1800, 2000),  # 6 of the H100 node's 8, until 1800
        _job("qa", A100, 8, 10, 600, 1000),  # blocked: the first reservation (A100)
        _job("qh", H100, 8, 20, 600, 1000),  # blocked: the H100 reservation
        _job("long", H100, 2, 30, 5000, 6000),  # fits now, would delay qh
        _job("short", H100, 2, 40, 500, 600),  # fits now, ends before qh's start
    ]
    r = simulate(nodes=NODES, teams={"a": SimTeam()}, jobs=jobs, cfg=SimConfig(eta=False))
    start = {j["id"]: j["runs"][0][0] for j in r["jobs"]}
    assert start["short"] <= 100  # backfilled at once: ends before the H100 reservation
    assert 1800 <= start["qh"] <= 1900  # when rh ends, not after the long backfill
    assert start["long"] >= start["qh"]  # held back behind qh
    assert 3600 <= start["qa"] <= 3700
    assert {j["id"]: j["accelerators"] for j in r["jobs"]}["qh"] == [H100]
