"""Context parallelism through the API (issue 29): a valid dp x cp spec is planned with the
sequence split; context parallel on CPU workers, or with ``2 x cp`` not dividing
``data.max_length``, is a 422 naming ``distributed.context_parallel_size`` and the fix, and
nothing is stored (the rules: ``shunter.jobspec.topology``)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select
from svc_helpers import bearer, tiny_spec

from service.db.tables import Event, IdempotencyKey, Job
from service.launch import InMemoryLauncher, NodeResources

CP = "distributed.context_parallel_size"


@pytest.fixture
def launcher() -> Any:
    """One node with 8 GPUs, so GPU jobs pass the capacity check."""
    node = NodeResources(node_id="gpu", address="127.0.0.1", alive=True, total_cpus=32,
                         free_cpus=32, total_gpus=8, free_gpus=8)  # fmt: skip
    return InMemoryLauncher(nodes=[node])


def _cp_spec(
    *,
    gpus: int = 1,
    max_length: int = 64,
    cp: int = 2,
    strategy: str = "ddp",
    tp: int = 1,
    workers: int = 4,
) -> dict[str, Any]:
    spec = tiny_spec()
    spec["model"].update(task="causal-lm", num_labels=None)
    spec["model"]["config_overrides"] = {"model_type": "llama", "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}  # fmt: skip
    spec["data"].update(label_field=None, max_length=max_length)
    spec["resources"] = {"num_workers": workers, "gpus_per_worker": gpus, "cpus_per_worker": 1}
    spec["distributed"] = {"strategy": strategy, "context_parallel_size": cp}
    if tp > 1:
        spec["distributed"]["tensor_parallel_size"] = tp
    return spec


def _rows(db: Any) -> tuple[int, int, int]:
    def count(model: Any) -> int:
        query = select(func.count()).select_from(model)
        return int(db.read(lambda s: s.execute(query).scalar_one()))

    return count(Job), count(Event), count(IdempotencyKey)


def test_a_dp_x_cp_job_is_planned_with_the_sequence_split(
    client: Any, admin_token: str, db: Any
) -> None:
    r = client.post("/v1/jobs", params={"dry_run": "true"}, json=_cp_spec(),
                    headers=bearer(admin_token))  # fmt: skip
    assert r.status_code == 200, r.text
    plan = r.json()["plan"]
    assert plan["mesh"] == {"dp": 2, "cp": 2} and plan["data_parallel_size"] == 2
    assert plan["context_parallel_size"] == 2
    per_device = plan["per_device_batch_size"]
    assert plan["sequence_tokens_per_device"] == per_device * 64 // 2
    assert _rows(db) == (0, 0, 0)


def test_a_dp_x_cp_x_tp_job_is_planned_on_the_3d_mesh(
    client: Any, admin_token: str, db: Any
) -> None:
    spec = _cp_spec(strategy="fsdp+tp", tp=2, workers=8)
    r = client.post("/v1/jobs", params={"dry_run": "true"}, json=spec, headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    plan = r.json()["plan"]
    assert plan["mesh"] == {"dp": 2, "cp": 2, "tp": 2} and plan["data_parallel_size"] == 2
    assert (plan["tensor_parallel_size"], plan["context_parallel_size"]) == (2, 2)
    assert plan["sequence_tokens_per_device"] == plan["per_device_batch_size"] * 64 // 2
    memory = plan["memory"]
    assert memory["shard"]["param"] == 2 * 2 * 2  # FSDP over dp x cp, TP over tp
    assert memory["params_bytes"] == plan["param_count"] * 4 // 8  # float32, 8-way
    assert _rows(db) == (0, 0, 0)


@pytest.mark.parametrize(
    ("spec", "phrase"),
    [
        (_cp_spec(gpus=0), "needs CUDA"),
        (_cp_spec(max_length=66), "2 x context_parallel_size (4) must divide data.max_length (66)"),
        (_cp_spec(strategy="tp", tp=2), "runs under strategy fsdp+tp"),
        (
            _cp_spec(strategy="fsdp+tp", tp=2, workers=6, max_length=64),
            "context_parallel_size (4) must divide resources.num_workers (6)",
        ),
    ],
    ids=["cpu-workers", "not-dividing-max-length", "strategy-tp", "3d-not-dividing-workers"],
)
def test_a_bad_context_parallel_spec_is_a_422_naming_the_field_and_stores_nothing(
    client: Any, admin_token: str, db: Any, spec: dict[str, Any], phrase: str
) -> None:
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    body = r.json()
    assert CP in r.text and phrase in r.text, body
    assert _rows(db) == (0, 0, 0)
