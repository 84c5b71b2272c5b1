"""A mixed cluster in the simulator (issue 30 item 1's bars): A100-40GB and H100-80GB nodes.

A job whose plan needs 60 GB per GPU runs only on H100s; per-type quotas hold; a job that
accepts both types starts on whichever frees first; a job no card holds is rejected naming
the largest card."""

from __future__ import annotations

import random
from typing import Any

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate

A100, H100 = "a100-40gb", "h100-80gb"
NODES: list[dict[str, Any]] = [
    {"gpus": 8, "cpus": 64, "accelerator": A100, "gpu_memory_gb": 40},
    {"gpus": 8, "cpus": 64, "accelerator": A100, "gpu_memory_gb": 40},
    {"gpus": 8, "cpus": 64, "accelerator": H100, "gpu_memory_gb": 80},
    {"gpus": 8, "cpus": 64, "accelerator": H100, "gpu_memory_gb": 80},
]


def _mixed_day(seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    jobs = []
    for i in range(240):
        need = rng.choice([None, 20.0, 35.0, 60.0, 70.0])
        asked: tuple[str, ...] = rng.choice([(), (), (A100,), (H100,), (A100, H100), (H100, A100)])
        if need is not None and need > 40 and asked == (A100,):
            asked = ()  # an A100-only 60 GB job would be rejected: tested apart
        jobs.append(
            SimJob(
                id=f"j{i:03d}",
                team=rng.choice(["a", "b"]),
                submit_s=rng.uniform(0, 4 * 3600),
                num_workers=1,
                gpus_per_worker=float(rng.choice([1, 2, 4])),
                cpus_per_worker=4.0,
                duration_s=rng.uniform(300, 3600),
                max_runtime_s=4000.0,
                accelerators=asked,
                gpu_memory_gb=need,
            )
        )
    return jobs


def _held_by(result: dict[str, Any], team_of: dict[str, str], team: str, kind: str) -> float:
    """The most GPUs of type ``kind`` ``team`` held at once."""
    events = []
    for j in result["jobs"]:
        if team_of[j["id"]] != team:
            continue
        for (a, b), t in zip(j["runs"], j["accelerators"], strict=True):
            if t == kind:
                events += [(a, 1, j["gpus"]), (b, -1, j["gpus"])]
    held = most = 0.0
    for _, sign, g in sorted(events, key=lambda e: (e[0], e[1])):  # ends before starts
        held += sign * g
        most = max(most, held)
    return most


def test_mixed_cluster_memory_types_and_per_type_quotas() -> None:
    jobs = _mixed_day(3)
    teams = {"a": SimTeam(quota_gpus_by_type={H100: 4}), "b": SimTeam()}
    r = simulate(nodes=NODES, teams=teams, jobs=jobs, cfg=SimConfig(eta=False))
    by_id = {j.id: j for j in jobs}
    gpus = {j.id: j.num_workers * j.gpus_per_worker for j in jobs}
    for j in r["jobs"]:
        j["gpus"] = gpus[j["id"]]
        line = by_id[j["id"]]
        assert len(j["runs"]) == len(j["accelerators"]) >= 1, j  # every job ran
        for t in j["accelerators"]:
            if (line.gpu_memory_gb or 0) > 40:
                assert t == H100, (j["id"], line.gpu_memory_gb, t)  # 60 GB: only H100s
            if line.accelerators:
                assert t in line.accelerators
    big = [j for j in jobs if (j.gpu_memory_gb or 0) > 40]
    assert len(big) > 30
    assert {t for j in r["jobs"] for t in j["accelerators"]} == {A100, H100}
    team_of = {j.id: j.team for j in jobs}
    assert _held_by(r, team_of, "a", H100) <= 4  # the quota held
    assert _held_by(r, team_of, "b", H100) > 4  # and it binds only team a
    by_type = r["summary"]["by_type"]
    assert by_type[H100]["gpus"] == 16 and by_type[H100]["memory_gb"] == 80
    assert by_type[A100]["jobs"] > 0 and by_type[H100]["gpu_s"] > 0
    assert r["summary"]["rejected"] == {}


def _blockers(h100_end: float, a100_end: float) -> list[SimJob]:
    def hold(i: str, t: str, d: float) -> SimJob:
        return SimJob(
            id=i,
            team="a",
            submit_s=0,
            num_workers=2,
            gpus_per_worker=8,
            cpus_per_worker=1,
            duration_s=d,
            accelerators=(t,),
        )

    return [hold("h", H100, h100_end), hold("a", A100, a100_end)]


def _either(prefer: tuple[str, ...]) -> SimJob:
    return SimJob(
        id="x",
        team="b",
        submit_s=30,
        num_workers=1,
        gpus_per_worker=8,
        cpus_per_worker=1,
        duration_s=600,
        accelerators=prefer,
    )


def test_a_job_that_accepts_both_starts_on_whichever_frees_first() -> None:
    teams = {"a": SimTeam(), "b": SimTeam()}
    for h_end, a_end, first in ((600, 3000, H100), (3000, 600, A100)):
        for prefer in ((A100, H100), (H100, A100)):
            jobs = [*_blockers(h_end, a_end), _either(prefer)]
            r = simulate(nodes=NODES, teams=teams, jobs=jobs, cfg=SimConfig(eta=False))
            x = next(j for j in r["jobs"] if j["id"] == "x")
            assert x["accelerators"] == [first], (prefer, x)
            assert 600 <= x["runs"][0][0] <= 660  # at the first tick after it freed


def test_a_job_no_card_holds_is_rejected_naming_the_largest() -> None:
    jobs = [
        SimJob(
            id="huge",
            team="a",
            submit_s=0,
            num_workers=1,
            gpus_per_worker=1,
            cpus_per_worker=1,
            duration_s=60,
            gpu_memory_gb=100,
        ),
        SimJob(
            id="a100-60",
            team="a",
            submit_s=0,
            num_workers=1,
            gpus_per_worker=1,
            cpus_per_worker=1,
            duration_s=60,
            accelerators=(A100,),
            gpu_memory_gb=60,
        ),
    ]
    r = simulate(nodes=NODES, teams={"a": SimTeam()}, jobs=jobs, cfg=SimConfig(eta=False))
    rej = r["summary"]["rejected"]
    assert H100 in rej["huge"] and "80 GiB" in rej["huge"] and "100.0 GiB" in rej["huge"]
    assert A100 in rej["a100-60"] and "asked for" in rej["a100-60"]
    assert r["jobs"] == []
