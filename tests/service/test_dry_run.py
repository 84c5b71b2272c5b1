"""POST /v1/jobs?dry_run=true: the same checks as a submit, a plan, and nothing written."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from svc_helpers import bearer, tiny_spec

from service.db.tables import Event, IdempotencyKey, Job
from service.launch import InMemoryLauncher, NodeResources


@pytest.fixture
def launcher() -> Any:
    """One node with 8 GPUs, so GPU jobs pass the capacity check."""
    node = NodeResources(
        node_id="gpu",
        address="127.0.0.1",
        alive=True,
        total_cpus=32,
        free_cpus=32,
        total_gpus=8,
        free_gpus=8,
    )
    return InMemoryLauncher(nodes=[node])


def gpu_spec(strategy: str = "ddp", **distributed: Any) -> dict[str, Any]:
    spec = tiny_spec()
    spec["resources"] = {"num_workers": 4, "gpus_per_worker": 1, "cpus_per_worker": 1}
    spec["training"]["per_device_train_batch_size"] = 2
    spec["distributed"] = {"strategy": strategy, **distributed}
    return spec


def rows(db: Any) -> tuple[int, int, int]:
    def count(model: Any) -> int:
        return int(
            db.read(lambda s: s.execute(select(func.count()).select_from(model)).scalar_one())
        )

    return count(Job), count(Event), count(IdempotencyKey)


def dry(client: Any, token: str, spec: dict[str, Any], **headers: str) -> Any:
    return client.post(
        "/v1/jobs", params={"dry_run": "true"}, json=spec, headers={**bearer(token), **headers}
    )


def test_dry_run_returns_spec_and_plan(client: Any, admin_token: str, db: Any) -> None:
    r = dry(client, admin_token, gpu_spec())
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"spec", "plan"}
    assert body["spec"]["name"] == "tiny" and body["spec"]["model"]["tokenizer"].startswith("/")
    plan = body["plan"]
    assert plan["world_size"] == 4 and plan["mesh"] == {"dp": 4}
    assert plan["global_batch_size"] == 8 and plan["accumulated_batch_size"] == 8
    # Counted on the meta device from the config: a positive, exact integer.
    assert isinstance(plan["param_count"], int) and plan["param_count"] > 0
    assert plan["trainable_param_count"] == plan["param_count"]
    # fp32 weights + grads + AdamW's two states, DDP; the fused AdamW keeps a 4 B step per tensor
    steps = plan["memory"]["optimizer_bytes"] - 8 * plan["param_count"]
    assert 0 < steps < 4 * 100 and steps % 4 == 0
    assert plan["memory"]["total_bytes"] == 16 * plan["param_count"] + steps
    assert plan["train_rows"] == 2  # the data_root's train.tsv: a header and two rows
    assert plan["total_steps"] == 20 and plan["fits"] is None


def test_zero3_estimate_is_below_ddp(client: Any, admin_token: str) -> None:
    ddp = dry(client, admin_token, gpu_spec()).json()["plan"]
    zero3 = dry(client, admin_token, gpu_spec("deepspeed", deepspeed={"stage": 3})).json()["plan"]
    assert zero3["param_count"] == ddp["param_count"]
    assert 0 < zero3["memory"]["total_bytes"] < ddp["memory"]["total_bytes"]
    # fp32 (no bf16): 16 B per parameter, everything sharded over the 4 ranks.
    assert zero3["memory"]["total_bytes"] == ddp["memory"]["total_bytes"] // 4


def test_dry_run_writes_nothing(client: Any, admin_token: str, db: Any) -> None:
    before = rows(db)
    for _ in range(2):
        r = dry(client, admin_token, gpu_spec(), **{"Idempotency-Key": "k1"})
        assert r.status_code == 200, r.text
    assert rows(db) == before == (0, 0, 0)
    assert client.get("/v1/jobs", headers=bearer(admin_token)).json()["data"] == []
    # The key was not taken: a real submit with it creates the job.
    real = client.post(
        "/v1/jobs", json=gpu_spec(), headers={**bearer(admin_token), "Idempotency-Key": "k1"}
    )
    assert real.status_code == 201 and rows(db) == (1, 1, 1)


@pytest.mark.parametrize(
    "breakage",
    [
        lambda s: s["training"].update(per_device_train_batch_size=0),  # pass 1
        lambda s: s["data"].update(train={"path": "missing.tsv", "format": "csv"}),  # pass 2
        lambda s: s["resources"].update(num_workers=16),  # capacity: 8 GPUs
    ],
)
def test_bad_spec_is_the_same_422(
    client: Any, admin_token: str, db: Any, breakage: Callable[[dict[str, Any]], None]
) -> None:
    spec = gpu_spec()
    breakage(spec)
    r_dry = dry(client, admin_token, copy.deepcopy(spec))
    r_real = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r_dry.status_code == r_real.status_code == 422
    assert r_dry.json() == r_real.json()
    assert rows(db) == (0, 0, 0)


def test_team_quota_and_priority_are_checked(
    client: Any, admin_token: str, make_token: Any, db: Any
) -> None:
    h = bearer(admin_token)
    r = client.post("/v1/teams", json={"name": "small", "quota": {"max_gpus": 2}}, headers=h)
    assert r.status_code == 201, r.text
    member = make_token("small", "member")
    quota_dry, quota_real = (
        dry(client, member, gpu_spec()),
        client.post("/v1/jobs", json=gpu_spec(), headers=bearer(member)),
    )
    assert quota_dry.status_code == quota_real.status_code == 422
    assert quota_dry.json() == quota_real.json() and "quota" in quota_dry.json()["message"]
    client.patch("/v1/teams/small", json={"max_priority": "normal"}, headers=h)
    high = {**gpu_spec(), "priority": "high", "resources": {"num_workers": 1, "gpus_per_worker": 1}}
    prio_dry = dry(client, member, high)
    prio_real = client.post("/v1/jobs", json=high, headers=bearer(member))
    assert prio_dry.status_code == prio_real.status_code == 403
    assert prio_dry.json() == prio_real.json()
    assert rows(db) == (0, 0, 0)


@pytest.fixture
def client_with_gpu_memory(
    make_settings: Callable[..., Any], launcher: Any
) -> Iterator[Callable[[int], tuple[Any, str]]]:
    from fastapi.testclient import TestClient

    from service.app import create_app

    opened: list[Any] = []

    def _open(gpu_memory_bytes: int) -> tuple[Any, str]:
        settings = make_settings(gpu_memory_bytes=gpu_memory_bytes)
        client = TestClient(create_app(settings, launcher=launcher)).__enter__()
        opened.append(client)
        return client, settings.admin_token_path.read_text().strip()

    yield _open
    for client in opened:
        client.__exit__(None, None, None)


def test_fits_follows_gpu_memory_setting(
    client_with_gpu_memory: Callable[[int], tuple[Any, str]],
) -> None:
    client, token = client_with_gpu_memory(10**12)
    plan = dry(client, token, gpu_spec()).json()["plan"]
    need = plan["memory"]["total_bytes"]
    assert plan["fits"] is True and plan["gpu_memory_bytes"] == 10**12
    small, token = client_with_gpu_memory(need - 1)
    assert dry(small, token, gpu_spec()).json()["plan"]["fits"] is False
    cpu = tiny_spec()  # gpus_per_worker 0: not assessed
    assert dry(small, token, cpu).json()["plan"]["fits"] is None
