"""Reproduce and clone: ``GET /v1/jobs/{id}/spec`` resubmits as is (every example, every
task), ``POST /v1/jobs/{id}/clone`` changes only what it is told, and a job's record."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.jobs.reproduce import HASH_MAX_BYTES, submit_record
from shunter.jobspec import JobSpec
from shunter.jobspec.spec import TASKS
from tests.service.svc_helpers import bearer, claim, internal, submit, tiny_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
# Job specs under examples/ a user submits to POST /v1/jobs (the sweep is a sweep, and
# torchrun/ is for running without the service).
JOB_EXAMPLES = sorted(
    p.relative_to(EXAMPLES).as_posix()
    for p in EXAMPLES.glob("*.*")
    if p.suffix in (".yaml", ".json")
)
_MEDIA = {".yaml": "application/yaml", ".json": "application/json"}
# What each task needs beside tiny_spec (train.tsv has the columns sentence and label).
_LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 30522,
    "max_position_embeddings": 64,
}
TASK_CHANGES: dict[str, dict[str, Any]] = {
    "sequence-classification": {},
    "token-classification": {},
    "multi-label-classification": {},
    "regression": {"model": {"num_labels": None}},
    "question-answering": {"model": {"num_labels": None}, "data": {"text_pair_field": "sentence"}},
    "masked-lm": {"model": {"num_labels": None}, "data": {"label_field": None}},
    "causal-lm": {
        "model": {"num_labels": None, "config_overrides": _LLAMA},
        "data": {"label_field": None},
    },
    "chat-sft": {
        "model": {"num_labels": None, "config_overrides": _LLAMA},
        "data": {"label_field": None},
    },
    "seq2seq": {
        "model": {"num_labels": None},
        "data": {"label_field": None, "target_field": "label"},
    },
}


def _seed_hub_cache(hf_home: Path, kind: str, repo: str) -> None:
    """A snapshot in the layout huggingface_hub writes (hub access off: the cache counts)."""
    base = hf_home / "hub" / f"{kind}s--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text("abc123")
    (base / "snapshots" / "abc123").mkdir(parents=True)
    (base / "snapshots" / "abc123" / "config.json").write_text("{}")


@pytest.fixture
def settings(make_settings: Callable[..., Any], data_root: Path, tmp_path: Path) -> Any:
    hf_home = tmp_path / "hf"  # the hub example's ids, in the server's cache
    _seed_hub_cache(hf_home, "model", "google-bert/bert-base-uncased")
    _seed_hub_cache(hf_home, "dataset", "nyu-mll/glue")
    return make_settings(
        data_roots=[data_root, EXAMPLES / "data"], hub_access="off", hf_home=str(hf_home)
    )


def _task_spec(task: str) -> dict[str, Any]:
    spec = tiny_spec(f"t-{task}")
    spec["model"]["task"] = task
    for section, changes in TASK_CHANGES[task].items():
        for key, value in changes.items():
            if value is None:
                spec[section].pop(key, None)
            else:
                spec[section][key] = value
    return spec


def _fetched(client: Any, token: str, job_id: str) -> dict[str, Any]:
    r = client.get(f"/v1/jobs/{job_id}/spec", headers=bearer(token))
    assert r.status_code == 200, r.text
    spec: dict[str, Any] = r.json()
    return spec


def _round_trip(client: Any, token: str, job_id: str) -> dict[str, Any]:
    """Fetch the spec, resubmit it as is; the second job's spec is the same document and its
    running spec differs from the first only in the service's output_dir."""
    fetched = _fetched(client, token, job_id)
    assert fetched["training"]["output_dir"] is None
    again = submit(client, token, fetched)
    assert _fetched(client, token, again["id"]) == fetched
    first = client.get(f"/v1/jobs/{job_id}", headers=bearer(token)).json()["spec"]
    second = again["spec"]
    assert first["training"].pop("output_dir").endswith(job_id)
    assert second["training"].pop("output_dir").endswith(again["id"])
    assert first == second
    return fetched


def test_the_task_table_covers_every_task() -> None:
    assert set(TASK_CHANGES) == set(TASKS), "a new task needs its row in TASK_CHANGES"


@pytest.mark.parametrize("example", JOB_EXAMPLES)
def test_every_example_resubmits_from_its_fetched_spec(
    client: Any, admin_token: str, example: str
) -> None:
    path = EXAMPLES / example
    r = client.post(
        "/v1/jobs",
        content=path.read_bytes(),
        headers={**bearer(admin_token), "Content-Type": _MEDIA[path.suffix]},
    )
    assert r.status_code == 201, r.text
    fetched = _round_trip(client, admin_token, r.json()["id"])
    # the user's form: the relative paths and hub ids as written, the defaults explicit
    train = fetched["data"]["train"]
    assert train.get("path") is None or not train["path"].startswith("/")
    assert fetched["training"]["seed"] == 42
    assert "learning_rate" in fetched["training"]


@pytest.mark.parametrize("task", TASKS)
def test_every_task_resubmits_from_its_fetched_spec(
    client: Any, admin_token: str, task: str
) -> None:
    job = submit(client, admin_token, _task_spec(task))
    fetched = _round_trip(client, admin_token, job["id"])
    assert fetched["model"]["task"] == task
    assert fetched["data"]["train"]["path"] == "train.tsv"


def _jobs(client: Any, token: str) -> int:
    return len(client.get("/v1/jobs", headers=bearer(token)).json()["data"])


def test_clone_changes_only_what_it_sets(client: Any, admin_token: str) -> None:
    source = submit(client, admin_token)
    r = client.post(
        f"/v1/jobs/{source['id']}/clone",
        json={"overrides": {"training.learning_rate": 1e-4, "name": "tiny-lr"}},
        headers=bearer(admin_token),
    )
    assert r.status_code == 201, r.text
    clone = r.json()
    assert clone["id"] != source["id"] and clone["status"] == "queued"
    before, after = (
        _fetched(client, admin_token, source["id"]),
        _fetched(client, admin_token, clone["id"]),
    )
    assert after["training"].pop("learning_rate") == 1e-4
    assert before["training"].pop("learning_rate") != 1e-4
    assert (before.pop("name"), after.pop("name")) == ("tiny", "tiny-lr")
    assert before == after


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"training.learning_rat": 1e-4}, "training.learning_rat"),
        ({"training.learning_rate": "fast"}, "training.learning_rate"),
        ({"name.first": "x"}, "name.first"),
    ],
)
def test_a_bad_clone_override_is_a_422_naming_the_field(
    client: Any, admin_token: str, overrides: dict[str, Any], field: str
) -> None:
    source = submit(client, admin_token)
    count = _jobs(client, admin_token)
    r = client.post(
        f"/v1/jobs/{source['id']}/clone",
        json={"overrides": overrides},
        headers=bearer(admin_token),
    )
    assert r.status_code == 422, r.text
    assert field in r.text
    assert _jobs(client, admin_token) == count  # nothing stored


def test_clone_of_an_unknown_job_is_404(client: Any, admin_token: str) -> None:
    r = client.post("/v1/jobs/job-0nosuch/clone", json={}, headers=bearer(admin_token))
    assert r.status_code == 404, r.text


def test_clone_from_a_checkpoint_starts_from_it(
    client: Any, admin_token: str, db: Any, data_root: Path
) -> None:
    source = submit(client, admin_token)
    # no checkpoint yet: the clone is refused, naming init_from
    r = client.post(
        f"/v1/jobs/{source['id']}/clone", json={"from_checkpoint": 5}, headers=bearer(admin_token)
    )
    assert r.status_code == 422 and "model.init_from" in r.text, r.text
    number, token = claim(db, source["id"])
    ckpt_dir = Path(source["spec"]["training"]["output_dir"]) / "checkpoint-5"
    ckpt_dir.mkdir(parents=True)
    r = client.post(
        internal(source["id"], number, "checkpoints"),
        json={"step": 5, "uri": str(ckpt_dir), "bytes": 1, "metrics": {}, "verified": True},
        headers=bearer(token),
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"/v1/jobs/{source['id']}/clone", json={"from_checkpoint": 5}, headers=bearer(admin_token)
    )
    assert r.status_code == 201, r.text
    init_from = r.json()["spec"]["model"]["init_from"]
    assert (init_from["job"], init_from["checkpoint"]) == (source["id"], 5)
    assert init_from["path"] == str(ckpt_dir)
    # the clone's fetched spec keeps the user's form: the service's path is not in it
    fetched = _fetched(client, admin_token, r.json()["id"])
    assert fetched["model"]["init_from"]["path"] is None


def test_the_record_keeps_versions_hashes_seed_and_the_runs_packages(
    client: Any, admin_token: str, db: Any, data_root: Path
) -> None:
    job = submit(client, admin_token, tiny_spec(seed=7))
    r = client.get(f"/v1/jobs/{job['id']}/record", headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    record = r.json()["record"]
    assert record["seed"] == 7 and record["code_version"]
    train = data_root / "train.tsv"
    assert train.stat().st_size <= HASH_MAX_BYTES
    assert record["data"]["train"]["sha256"] == hashlib.sha256(train.read_bytes()).hexdigest()
    assert record["tokenizer"]["path"].endswith("all-MiniLM-L6-v2")
    assert "sha256" in record["tokenizer"]["files"]["config.json"]
    number, token = claim(db, job["id"])
    versions = {"code_version": "git:abc", "python": "3.12.1", "packages": {"torch": "2.13.0"}}
    r = client.post(
        internal(job["id"], number, "status"),
        json={"status": "running", "versions": versions},
        headers=bearer(token),
    )
    assert r.status_code == 200, r.text
    record = client.get(f"/v1/jobs/{job['id']}/record", headers=bearer(admin_token)).json()
    assert record["record"]["run"] == {"attempt": number, **versions}
    assert record["record"]["seed"] == 7  # the submit's part is kept


def test_the_record_names_stored_objects_and_hub_data_without_reading_them() -> None:
    spec = tiny_spec()
    spec["data"]["train"] = {"dataset": "ds-0123456789abcdef"}
    spec["data"]["eval"] = {"hub": "nyu-mll/glue", "config": "sst2", "split": "validation"}
    record = submit_record(JobSpec.model_validate(spec))
    assert record["data"]["train"] == {"object": "ds-0123456789abcdef"}
    hub = {"hub": "nyu-mll/glue", "config": "sst2", "split": "validation"}
    assert record["data"]["eval"] == hub
