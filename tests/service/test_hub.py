"""Hub ids and trackers at submit (service.jobs.hub): allowed organisations, existence and size
through a fake Hub, the server's cache when Hub access is off, mlflow without a server URI."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.jobs.hub import (
    EcosystemPolicy,
    ecosystem_errors,
    hub_ids,
    in_cache,
    resolve_hub_access,
)
from shunter.jobspec import JobSpec


class FakeHub:
    """A small real ``HubLookup``: a dict of repositories and their sizes."""

    def __init__(self, models: dict[str, int], datasets: set[str]) -> None:
        self.models, self.datasets = models, datasets

    def model_bytes(self, repo_id: str) -> int | None:
        return self.models.get(repo_id)

    def dataset_exists(self, repo_id: str) -> bool:
        return repo_id in self.datasets


def _spec(
    model: str = "org/tiny", data: dict[str, object] | None = None, **training: object
) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "hub",
            "model": {"name_or_path": model, "task": "sequence-classification", "num_labels": 2},
            "data": {
                "train": data or {"hub": "glue", "config": "sst2"},
                "label_field": "label",
                "text_field": "sentence",
            },
            "training": training,
        }
    )


def seed_cache(hf_home: Path, kind: str, repo: str) -> None:
    """A snapshot in the hub cache layout huggingface_hub writes."""
    base = hf_home / "hub" / f"{kind}s--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text("abc123")
    snap = base / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")


def _messages(errors: list[object]) -> dict[str, str]:
    return {e.loc: e.message for e in errors}  # type: ignore[attr-defined]


def test_hub_ids_lists_models_and_datasets_once() -> None:
    assert hub_ids(_spec()) == [
        ("model.name_or_path", "model", "org/tiny"),
        ("data.train.hub", "dataset", "glue"),
    ]


ONLINE_CASES = [
    # (model, models on the hub, datasets on the hub, max bytes, orgs, expected {loc: fragment})
    ("org/tiny", {"org/tiny": 10}, {"glue"}, 100, (), {}),
    ("org/missing", {}, {"glue"}, 100, (), {"model.name_or_path": "does not exist"}),
    ("org/tiny", {"org/tiny": 10}, set(), 100, (), {"data.train.hub": "does not exist"}),
    (
        "org/huge",
        {"org/huge": 10**12},
        {"glue"},
        10**9,
        (),
        {"model.name_or_path": "over this server's limit"},
    ),
    (
        "other/tiny",
        {"other/tiny": 1},
        {"glue"},
        100,
        ("org",),
        {
            "model.name_or_path": "outside the organisations",
            "data.train.hub": "outside the organisations",
        },
    ),
]


@pytest.mark.parametrize(("model", "models", "datasets", "max_bytes", "orgs", "want"), ONLINE_CASES)
def test_online_checks(
    tmp_path: Path,
    model: str,
    models: dict[str, int],
    datasets: set[str],
    max_bytes: int,
    orgs: tuple[str, ...],
    want: dict[str, str],
) -> None:
    policy = EcosystemPolicy(
        hub_online=True,
        allowed_orgs=orgs,
        hf_home=tmp_path,
        max_model_bytes=max_bytes,
        mlflow_configured=True,
    )
    got = _messages(ecosystem_errors(_spec(model), policy=policy, lookup=FakeHub(models, datasets)))
    assert set(got) == set(want), got
    for loc, fragment in want.items():
        assert fragment in got[loc]


def test_offline_needs_the_server_cache(tmp_path: Path) -> None:
    policy = EcosystemPolicy(hub_online=False, hf_home=tmp_path, mlflow_configured=True)
    got = _messages(ecosystem_errors(_spec(), policy=policy))
    assert set(got) == {"model.name_or_path", "data.train.hub"}
    assert "Hub access is off" in got["model.name_or_path"]
    assert str(tmp_path) in got["model.name_or_path"]
    seed_cache(tmp_path, "model", "org/tiny")
    seed_cache(tmp_path, "dataset", "glue")
    assert in_cache(tmp_path, "model", "org/tiny")
    assert ecosystem_errors(_spec(), policy=policy) == []


def test_mlflow_needs_a_tracking_uri(tmp_path: Path) -> None:
    spec = _spec(data={"path": "/x.csv"}, report_to=["mlflow"])
    off = EcosystemPolicy(hub_online=True, hf_home=tmp_path, mlflow_configured=False)
    lookup = FakeHub({"org/tiny": 1}, set())
    got = _messages(ecosystem_errors(spec, policy=off, lookup=lookup))
    assert "SHUNTER_MLFLOW_TRACKING_URI" in got["training.report_to"]
    on = EcosystemPolicy(hub_online=True, hf_home=tmp_path, mlflow_configured=True)
    assert ecosystem_errors(spec, policy=on, lookup=lookup) == []


def test_resolve_hub_access(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_hub_access("on") == "on"
    assert resolve_hub_access("off") == "off"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_hub_access("auto") == "off"  # no network probe under HF_HUB_OFFLINE


# ---- through the API: the same checks on POST /v1/jobs ----------------------------------


def _hub_spec() -> dict[str, object]:
    from svc_helpers import tiny_spec

    spec = tiny_spec()
    spec["model"] = {**spec["model"], "tokenizer": "shunter-test/tiny-tok"}  # type: ignore[dict-item]
    return spec


def test_submit_refuses_a_hub_id_while_hub_access_is_off(client: object, admin_token: str) -> None:
    from svc_helpers import bearer

    r = client.post("/v1/jobs", json=_hub_spec(), headers=bearer(admin_token))  # type: ignore[attr-defined]
    assert r.status_code == 422, r.text
    body = r.json()
    assert "model.tokenizer" in r.text and "Hub access is off" in r.text, body


def test_submit_accepts_a_hub_id_in_the_server_cache(
    make_settings: object, launcher: object, tmp_path: Path
) -> None:
    from fastapi.testclient import TestClient
    from svc_helpers import bearer

    from service.app import create_app

    settings = make_settings(hf_home=str(tmp_path / "hf"), hub_access="off")  # type: ignore[operator]
    seed_cache(tmp_path / "hf", "model", "shunter-test/tiny-tok")
    with TestClient(create_app(settings, launcher=launcher)) as client:  # type: ignore[arg-type]
        token = settings.admin_token_path.read_text().strip()
        r = client.post("/v1/jobs", json=_hub_spec(), headers=bearer(token))
        assert r.status_code == 201, r.text
        assert r.json()["spec"]["model"]["tokenizer"] == "shunter-test/tiny-tok"


def test_hub_example_is_refused_offline_naming_every_hub_field(
    client: object, admin_token: str
) -> None:
    from svc_helpers import bearer

    example = Path(__file__).resolve().parents[2] / "examples" / "hub-bert.yaml"
    r = client.post(  # type: ignore[attr-defined]
        "/v1/jobs",
        content=example.read_bytes(),
        headers={**bearer(admin_token), "Content-Type": "application/yaml"},
    )
    assert r.status_code == 422, r.text
    locs = {e["loc"] for e in r.json()["detail"]}
    assert {"model.name_or_path", "data.train.hub", "data.eval.hub"} <= locs, r.text
    assert "Hub access is off" in r.text
