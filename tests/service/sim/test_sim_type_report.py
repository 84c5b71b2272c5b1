"""The simulator's report on a mixed cluster (issue 30): the share error is over the
type-weighted dominant shares (``Interval.shares``, the owed account's held and fair share),
not pooled GPU-seconds, and each type's GPU-seconds are given per team. Untyped reports keep
their keys and figures (``test_sim_report``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from service.sim.engine import SimConfig, SimJob, simulate
from service.sim.report import Interval, summarize
from shunter.cli import app

A100, H100 = "a100", "h100"
# 8 A100s and 24 H100s.
NODES: list[dict[str, Any]] = [
    {"gpus": 8, "cpus": 64, "accelerator": A100},
    *({"gpus": 8, "cpus": 64, "accelerator": H100} for _ in range(3)),
]


def _day(hours: float) -> list[SimJob]:
    """a submits 8-GPU A100 jobs and b 8-GPU H100 jobs, 1 h each, ahead of what each type can
    run: both teams always have work queued (they contend), each on its own type."""
    jobs = []
    for team, on, every in (("a", A100, 1800.0), ("b", H100, 600.0)):
        for i in range(int(hours * 3600 / every)):
            jobs.append(
                SimJob(
                    id=f"{team}{i}",
                    team=team,
                    submit_s=i * every,
                    num_workers=1,
                    gpus_per_worker=8,
                    cpus_per_worker=1.0,
                    duration_s=3600.0,
                    max_runtime_s=4200.0,
                    accelerators=(on,),
                )
            )
    return jobs


def test_each_team_holding_all_of_its_own_type_has_no_share_error() -> None:
    """Per type a holds all of the A100s and b all of the H100s, each its whole fair share
    (each type shared out by itself): no error. Pooled GPU-seconds counted a (8 of 32)
    half below its fair 16 and b (24) half above."""
    r = simulate(nodes=NODES, teams={}, jobs=_day(6), cfg=SimConfig(eta=False))
    s = r["summary"]
    assert s["share_basis"] == "dominant share per type"
    assert s["contended_s"] > 5 * 3600
    for team in ("a", "b"):
        row = s["teams"][team]
        assert row["share_error"] == pytest.approx(0.0, abs=1e-3)
        assert row["share_error_pooled"] == pytest.approx(0.5, abs=0.02)
        # share-seconds now: all of a type held over the contended time
        assert row["contended_s"] == pytest.approx(s["contended_s"], rel=1e-3)
    assert s["jain_index"] == pytest.approx(1.0, abs=1e-4)
    by = s["by_type"]
    assert set(by[A100]["team_gpu_s"]) == {"a"} and set(by[H100]["team_gpu_s"]) == {"b"}
    for on in (A100, H100):
        assert sum(by[on]["team_gpu_s"].values()) == pytest.approx(by[on]["gpu_s"], abs=0.2)
    assert by[A100]["team_gpu_s"]["a"] == pytest.approx(s["teams"]["a"]["gpu_s"], abs=0.1)


def test_untyped_report_has_no_per_type_keys() -> None:
    untyped = [{k: v for k, v in n.items() if k != "accelerator"} for n in NODES]
    jobs = [replace(j, accelerators=()) for j in _day(2)]
    s = simulate(nodes=untyped, teams={}, jobs=jobs, cfg=SimConfig(eta=False))["summary"]
    assert "share_basis" not in s and "by_type" not in s
    assert all("share_error_pooled" not in row for row in s["teams"].values())


def test_summarize_reads_the_dominant_shares_on_a_mixed_cluster() -> None:
    """By hand: 100 s contended where a held 0.5 of its fair 1.0 and b 1.0 of 0.5 (dominant
    shares), then 100 s where both held their fair share; GPU counts say both held 8 of
    their fair 8 (pooled error 0)."""

    def iv(start: float, shares: dict[str, tuple[float, float]]) -> Interval:
        return Interval(
            start_s=start,
            end_s=start + 100,
            held={"a": (1.0, 8.0), "b": (1.0, 8.0)},
            demand={"a": (2.0, 16.0), "b": (2.0, 16.0)},
            waiting=2,
            waiting_teams=frozenset({"a", "b"}),
            shares=shares,
        )

    ivs = [iv(0, {"a": (0.5, 1.0), "b": (1.0, 0.5)}), iv(100, {"a": (1.0, 1.0), "b": (0.5, 0.5)})]
    s = summarize([], ivs, weights={"a": 1.0, "b": 1.0}, total_cpus=64.0, total_gpus=16.0)
    a, b = s["teams"]["a"], s["teams"]["b"]
    assert (a["contended_s"], a["fair_contended_s"]) == (150.0, 200.0)
    assert (b["contended_s"], b["fair_contended_s"]) == (150.0, 100.0)
    assert a["share_error"] == 0.25 and b["share_error"] == 0.5
    assert a["share_error_pooled"] == 0.0 and b["share_error_pooled"] == 0.0


def test_admin_sim_prints_each_types_gpu_seconds_per_team(tmp_path: Path) -> None:
    """``shunter admin sim`` on the mixed cluster: each type's line gives its GPU-seconds
    per team, and the share error over the dominant shares per type is printed."""
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": NODES}))
    (tmp_path / "teams.json").write_text(json.dumps({"a": {"weight": 1}, "b": {"weight": 1}}))
    lines = [
        {**{k: v for k, v in j.__dict__.items() if k != "accelerators"}, "accelerator": on}
        for j in _day(2)
        for on in j.accelerators
    ]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out.json"
    args = ["admin", "sim", "--out", str(out)]
    for name in ("cluster", "teams", "trace"):
        args += [f"--{name}", str(tmp_path / f"{name}.json{'l' if name == 'trace' else ''}")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    by = json.loads(out.read_text())["summary"]["by_type"]
    a, b = by[A100]["team_gpu_s"]["a"], by[H100]["team_gpu_s"]["b"]
    assert f"a100: 8 GPUs, {by[A100]['jobs']} jobs, {a:g} GPU-s (a {a:g})" in result.output
    assert f"h100: 24 GPUs, {by[H100]['jobs']} jobs, {b:g} GPU-s (b {b:g})" in result.output
    assert "share error (dominant share per type): a 0.0, b 0.0" in result.output
