"""``shunter admin nodes`` and ``shunter admin uncordon`` end to end: a fake driver reports a
window in which rank 1 straggles; the CLI lists its node with the flag, and uncordons it."""

from __future__ import annotations

import json
from typing import Any

from live_server import LiveServer, valid_spec
from typer.testing import CliRunner, Result

from shunter.cli import app
from shunter.client import Client


def run(live: LiveServer, *args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--url", live.url, "--token", live.admin_token])


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_admin_nodes_lists_a_flagged_node_and_uncordons_it(live: LiveServer) -> None:
    spec = valid_spec("straggly")
    spec["resources"] = {"num_workers": 2, "gpus_per_worker": 0, "cpus_per_worker": 1}
    job = Client(live.url, token=live.admin_token).submit(spec)
    driver = live.driver(job.id)
    driver.status("running")
    for rank, node in ((0, "cli-node-a"), (1, "cli-node-b")):
        driver._post("/workers", {"rank": rank, "pid": 10 + rank, "node_id": node, "node_ip": ""})
    window = {
        "window/ranks": 2.0,
        "rank/0/compute_s": 0.1,
        "rank/0/wait_s": 0.5,
        "rank/1/compute_s": 0.5,
        "rank/1/wait_s": 0.01,
    }
    points = [{"step": 50, "name": k, "value": v} for k, v in window.items()]
    driver.metrics(points, step=50, total=100)

    rows = as_json(run(live, "admin", "nodes", "--json"))
    mine = [r for r in rows if r["node_id"] == "cli-node-b"]
    assert len(mine) == 1 and mine[0]["flags"] == 1 and mine[0]["last_job_id"] == job.id
    assert mine[0]["cordoned"] is False  # this server never cordons (CORDON_AFTER 0)
    table = run(live, "admin", "nodes")
    assert table.exit_code == 0 and "cli-node-b" in table.output
    assert as_json(run(live, "admin", "uncordon", "cli-node-b", "--json"))["cordoned"] is False
    rows = as_json(run(live, "admin", "nodes", "--json"))
    assert [r["flags"] for r in rows if r["node_id"] == "cli-node-b"] == [0]
    assert run(live, "admin", "uncordon", "never-seen").exit_code != 0
