"""Team datasets and base models in the store (issue #28): upload checked (format, columns,
rows, sample; a bad line is a 422 naming it), list/show/delete, another team's id is a 404,
an interrupted or failed upload leaves nothing, a spec naming a missing column is a 422 with
nothing stored, a job's inputs reach the driver's payload and keep the bytes until the job is
deleted. SQLite and PostgreSQL (``db_url``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from svc_helpers import bearer, claim, internal, tiny_spec

import storage
from service.db.tables import Job, ObjectRef, TeamObject
from storage.manifest import MANIFEST

TSV = b"sentence\tlabel\ngood film\t1\nbad film\t0\nfine film\t1\n"


def _push(client: Any, token: str, files: dict[str, bytes], name: str | None = None) -> Any:
    parts = [("file", (path, data)) for path, data in files.items()]
    return client.post(
        "/v1/datasets", files=parts, data={"name": name} if name else {}, headers=bearer(token)
    )


def _objects(settings: Any) -> list[str]:
    return sorted(rel for rel, _ in storage.list_files(storage.join(settings.storage, "objects")))


def _dataset_spec(ds: str, **data: Any) -> dict[str, Any]:
    spec = tiny_spec("obj")
    spec["data"] = {
        "train": {"dataset": ds},
        "text_field": "sentence",
        "label_field": "label",
        **data,
    }
    return spec


def test_upload_checks_lists_shows_and_deletes(
    client: Any, make_token: Callable[..., str], settings: Any
) -> None:
    token = make_token("alpha")
    r = _push(client, token, {"train.tsv": TSV}, name="films")
    assert r.status_code == 201, r.text
    ds = r.json()
    assert ds["id"].startswith("ds-") and ds["name"] == "films" and ds["format"] == "tsv"
    assert ds["columns"] == ["sentence", "label"] and ds["rows"] == 3
    assert ds["sample"][0] == {"sentence": "good film", "label": "1"}
    # Content-addressed: the digest is the SHA-256 of the stored manifest, written last.
    obj = storage.join(settings.storage, storage.object_dir(ds["digest"]))
    manifest = storage.read_bytes(storage.join(obj, MANIFEST))
    assert hashlib.sha256(manifest).hexdigest() == ds["digest"]
    assert json.loads(manifest)["files"]["train.tsv"]["sha256"] == hashlib.sha256(TSV).hexdigest()
    assert storage.read_bytes(storage.join(obj, "train.tsv")) == TSV

    listed = client.get("/v1/datasets", headers=bearer(token)).json()["data"]
    assert [d["id"] for d in listed] == [ds["id"]]
    assert client.get(f"/v1/datasets/{ds['id']}", headers=bearer(token)).json() == ds

    # The same bytes again: a second row, one object.
    again = _push(client, token, {"train.tsv": TSV}).json()
    assert again["digest"] == ds["digest"] and again["id"] != ds["id"]
    assert client.delete(f"/v1/datasets/{ds['id']}", headers=bearer(token)).status_code == 204
    assert client.get(f"/v1/datasets/{ds['id']}", headers=bearer(token)).status_code == 404
    assert storage.exists(storage.join(obj, MANIFEST))  # the other row still names it
    assert client.delete(f"/v1/datasets/{again['id']}", headers=bearer(token)).status_code == 204
    assert _objects(settings) == []


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("bad.jsonl", b'{"text": "a"}\n{"text": \n', "bad.jsonl: line 2: not JSON"),
        ("bad.jsonl", b'{"text": "a"}\n[1, 2]\n', "line 2: expected a JSON object"),
        ("bad.jsonl", b'{"text": "a", "label": 1}\n{"text": "b"}\n', "missing column(s) label"),
        ("bad.csv", b"a,b\n1,2\n3\n", "bad.csv: line 3: 1 fields, the header has 2"),
        ("bad.parquet", b"PAR1 not really", "not a readable parquet file"),
        ("bad.xlsx", b"x", "unknown format"),
        ("empty.jsonl", b"\n\n", "no rows"),
    ],
)
def test_a_bad_file_is_a_422_naming_it_and_stores_nothing(
    client: Any,
    make_token: Callable[..., str],
    db: Any,
    settings: Any,
    name: str,
    content: bytes,
    problem: str,
) -> None:
    r = _push(client, make_token("alpha"), {name: content})
    assert r.status_code == 422 and problem in r.json()["message"], r.text
    assert db.read(lambda s: s.execute(select(func.count()).select_from(TeamObject)).scalar()) == 0
    assert _objects(settings) == []


def test_parquet_and_a_folder_of_jsonl(
    client: Any, make_token: Callable[..., str], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    token = make_token("alpha")
    pq.write_table(pa.table({"text": ["a", "b"], "label": [0, 1]}), tmp_path / "t.parquet")
    r = _push(client, token, {"t.parquet": (tmp_path / "t.parquet").read_bytes()})
    assert r.status_code == 201, r.text
    assert (r.json()["format"], r.json()["columns"], r.json()["rows"]) == (
        "parquet",
        ["text", "label"],
        2,
    )
    shards = {f"part/{i}.jsonl": b'{"text": "x", "label": 1}\n' * (i + 1) for i in range(3)}
    r = _push(client, token, shards)
    assert r.status_code == 201 and r.json()["rows"] == 6, r.text
    assert r.json()["files"] == sorted(shards)
    r = _push(client, token, {"../escape.jsonl": b'{"text": "x"}\n'})
    assert r.status_code == 422 and "not a relative file path" in r.json()["message"]


def test_another_teams_dataset_is_a_404_everywhere(
    client: Any, make_token: Callable[..., str]
) -> None:
    alpha, beta = make_token("alpha"), make_token("beta")
    ds = _push(client, alpha, {"train.tsv": TSV}).json()["id"]
    assert client.get(f"/v1/datasets/{ds}", headers=bearer(beta)).status_code == 404
    assert client.delete(f"/v1/datasets/{ds}", headers=bearer(beta)).status_code == 404
    assert client.get("/v1/datasets", headers=bearer(beta)).json()["data"] == []
    r = client.post("/v1/jobs", json=_dataset_spec(ds), headers=bearer(beta))
    assert r.status_code == 422 and f"dataset {ds} not found" in r.text, r.text


def test_an_interrupted_or_failed_upload_leaves_nothing(
    client: Any, make_token: Callable[..., str], db: Any, settings: Any, monkeypatch: Any
) -> None:
    token = make_token("alpha")
    boundary = "b0undary"
    cut = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="t.tsv"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode() + TSV[:20]  # the client went away: no closing boundary
    r = client.post(
        "/v1/datasets",
        content=cut,
        headers={**bearer(token), "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert r.status_code in (400, 422), r.text
    # A write that fails after the files went up: no manifest, so no object, and no row.
    real = storage.manifest.write_bytes

    def fail_on_manifest(uri: str, data: bytes) -> None:
        if uri.endswith(MANIFEST):
            raise OSError("connection reset")
        real(uri, data)

    monkeypatch.setattr(storage.manifest, "write_bytes", fail_on_manifest)
    with pytest.raises(OSError):
        _push(client, token, {"train.tsv": TSV})
    assert db.read(lambda s: s.execute(select(func.count()).select_from(TeamObject)).scalar()) == 0
    assert not [p for p in _objects(settings) if p.endswith(MANIFEST)]


def test_missing_label_column_is_a_422_and_inputs_reach_the_driver(
    client: Any, make_token: Callable[..., str], db: Any, settings: Any
) -> None:
    token = make_token("alpha")
    ds = _push(client, token, {"train.tsv": TSV}).json()
    r = client.post(
        "/v1/jobs", json=_dataset_spec(ds["id"], label_field="score"), headers=bearer(token)
    )
    assert r.status_code == 422, r.text
    assert "data.label_field" in r.text and "'score' is not in dataset" in r.text
    assert db.read(lambda s: s.execute(select(func.count()).select_from(Job)).scalar()) == 0

    job = client.post("/v1/jobs", json=_dataset_spec(ds["id"]), headers=bearer(token))
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    n, t = claim(db, job_id)
    payload = client.get(internal(job_id, n, "spec"), headers=bearer(t)).json()
    entry = payload["inputs"][ds["id"]]
    assert entry["digest"] == ds["digest"] and entry["kind"] == "dataset"
    assert (entry["format"], entry["delimiter"], entry["file"]) == ("csv", "\t", "train.tsv")
    assert entry["uri"] == storage.join(settings.storage, storage.object_dir(ds["digest"]))
    assert payload["spec"]["data"]["train"]["dataset"] == ds["id"]

    # rm hides it; the job keeps the bytes until the job is deleted.
    assert client.delete(f"/v1/datasets/{ds['id']}", headers=bearer(token)).status_code == 204
    assert storage.exists(storage.join(entry["uri"], MANIFEST))
    assert db.read(lambda s: s.execute(select(func.count()).select_from(ObjectRef)).scalar()) == 1
    db.write(lambda s: s.get(Job, job_id).__setattr__("status", "cancelled"))
    assert client.delete(f"/v1/jobs/{job_id}", headers=bearer(token)).status_code == 204
    assert not storage.exists(storage.join(entry["uri"], MANIFEST))


def test_base_model_upload_is_checked(client: Any, make_token: Callable[..., str]) -> None:
    token = make_token("alpha")
    config = json.dumps({"model_type": "bert", "hidden_size": 32}).encode()
    good = {
        "config.json": config,
        "model.safetensors": b"\0" * 64,
        "tokenizer.json": b"{}",
    }
    r = client.post(
        "/v1/models", files=[("file", (k, v)) for k, v in good.items()], headers=bearer(token)
    )
    assert r.status_code == 201, r.text
    mdl = r.json()
    assert mdl["id"].startswith("mdl-") and mdl["format"] == "hf"
    assert [
        m["id"] for m in client.get("/v1/models/uploaded", headers=bearer(token)).json()["data"]
    ] == [mdl["id"]]
    assert (
        client.get(f"/v1/models/{mdl['id']}", headers=bearer(make_token("beta"))).status_code == 404
    )
    pickle_only = {"config.json": config, "pytorch_model.bin": b"x", "tokenizer.json": b"{}"}
    r = client.post(
        "/v1/models",
        files=[("file", (k, v)) for k, v in pickle_only.items()],
        headers=bearer(token),
    )
    assert r.status_code == 422 and "pickle" in r.text, r.text
    spec = tiny_spec("m")
    spec["model"] = {**spec["model"], "tokenizer": mdl["id"]}
    r = client.post("/v1/jobs", json=spec, headers=bearer(token))
    assert r.status_code == 201, r.text
    assert client.delete(f"/v1/models/{mdl['id']}", headers=bearer(token)).status_code == 204


def test_a_sweep_checks_its_dataset_and_each_trial_keeps_it(
    client: Any, make_token: Callable[..., str], db: Any, settings: Any, launcher: Any
) -> None:
    from service.sweeps.controller import SweepController

    token = make_token("alpha")
    ds = _push(client, token, {"train.tsv": TSV}).json()["id"]
    space = {"training.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True}}

    def base(**data: Any) -> dict[str, Any]:
        spec = _dataset_spec(ds, eval={"dataset": ds}, **data)
        spec["training"] |= {"eval_strategy": "steps", "eval_steps": 2}
        return spec

    body = {
        "name": "lr",
        "base": base(label_field="score"),
        "space": space,
        "objective": "eval_accuracy",
        "direction": "maximize",
        "max_trials": 2,
        "max_parallel": 2,
        "sampler": "random",
        "seed": 7,
    }
    r = client.post("/v1/sweeps", json=body, headers=bearer(token))
    assert r.status_code == 422 and "'score' is not in dataset" in r.text, r.text
    body["base"] = base()
    r = client.post("/v1/sweeps", json=body, headers=bearer(token))
    assert r.status_code in (200, 201), r.text
    assert len(SweepController(settings, db, launcher).tick().sampled) == 2
    refs = db.read(lambda s: list(s.execute(select(ObjectRef.object_id)).scalars()))
    assert refs == [ds, ds]


def test_admin_gc_collects_what_a_crash_after_rm_left(
    client: Any, make_token: Callable[..., str], db: Any, settings: Any, admin_token: str
) -> None:
    token = make_token("alpha")
    ds = _push(client, token, {"train.tsv": TSV}).json()
    # rm's row update landed, its collection did not (the process died in between).
    db.write(
        lambda s: s.get(TeamObject, ds["id"]).__setattr__(
            "deleted_at", s.get(TeamObject, ds["id"]).created_at
        )
    )
    assert _objects(settings) != []
    r = client.post("/v1/admin/gc", json={"older_than": "30d"}, headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    assert _objects(settings) == []
    assert db.read(lambda s: s.get(TeamObject, ds["id"])) is None


def test_an_uploaded_models_config_is_checked_at_submit(
    client: Any, make_token: Callable[..., str]
) -> None:
    token = make_token("alpha")
    files = {
        "config.json": json.dumps({"model_type": "bert"}).encode(),
        "model.safetensors": b"\0" * 64,
        "tokenizer.json": b"{}",
    }
    parts = [("file", (k, v)) for k, v in files.items()]
    mdl = client.post("/v1/models", files=parts, headers=bearer(token)).json()["id"]
    spec = tiny_spec("m")
    spec["model"] = {
        "name_or_path": mdl,
        "task": "sequence-classification",
        "num_labels": 2,
        "config_overrides": {"not_a_bert_field": 1},
    }
    r = client.post("/v1/jobs", json=spec, headers=bearer(token))
    assert r.status_code == 422 and "not_a_bert_field" in r.text, r.text
    spec["model"]["config_overrides"] = {"hidden_dropout_prob": 0.2}
    assert client.post("/v1/jobs", json=spec, headers=bearer(token)).status_code == 201
