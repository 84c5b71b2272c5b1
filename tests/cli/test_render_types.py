"""``shunter ray-status``'s tables on a typed cluster: each node's GPU type, then GPUs by type
(issue 30 item 1). Pure render."""

from __future__ import annotations

from rich.console import Console

from shunter.cli.render import cluster_table
from shunter.client.responses import Cluster


def _text(cluster: Cluster) -> str:
    console = Console(width=160, record=True)
    console.print(cluster_table(cluster))
    return console.export_text()


def test_ray_status_shows_capacity_by_type() -> None:
    cluster = Cluster.model_validate(
        {
            "total_cpus": 128,
            "free_cpus": 100,
            "total_gpus": 16,
            "free_gpus": 5,
            "nodes": [
                {"node_id": "aaaa", "total_gpus": 8, "free_gpus": 1, "accelerator": "h100"},
                {"node_id": "bbbb", "total_gpus": 8, "free_gpus": 4, "accelerator": "a100-40g"},
            ],
            "by_type": {
                "a100-40g": {"nodes": 1, "total_gpus": 8, "free_gpus": 4, "memory_gb": 40},
                "h100": {"nodes": 1, "total_gpus": 8, "free_gpus": 1, "memory_gb": 80, "weight": 2},
            },
        }
    )
    text = _text(cluster)
    assert "GPUs by type" in text
    by_type = text.split("GPUs by type", 1)[1]
    rows = {
        cells[0]: cells[1:]
        for line in by_type.splitlines()
        if (cells := [c.strip() for c in line.strip("│┃ ").split("│")]) and len(cells) == 5
    }
    assert rows["h100"] == ["1", "1/8", "80 GB", "2"]
    assert rows["a100-40g"] == ["1", "4/8", "40 GB", "1"]
    assert "a100-40g" in text.split("GPUs by type", 1)[0]  # the node's type, in the node table


def test_an_untyped_cluster_shows_one_table() -> None:
    cluster = Cluster.model_validate(
        {"total_cpus": 8, "free_cpus": 8, "nodes": [{"node_id": "n", "total_cpus": 8}]}
    )
    assert "GPUs by type" not in _text(cluster)
