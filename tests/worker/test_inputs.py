"""A job's stored inputs on a node (``worker.inputs``) against a real local S3 server: the spec
the training function hands trainer_core names local files; datasets are fetched only when
read, models at once, listed ``uri`` inputs checked against their sizes and ETags; the
tokenised-dataset claim and publish work through the bucket."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server, aws_env, running_s3

import storage
from storage.manifest import publish_object
from worker.classify import classify
from worker.inputs import NodeInputs, localize, tokenized_root
from worker.object_cache import DataCorrupt, ObjectCache

ROWS = [{"text": f"row {i}", "label": i % 2} for i in range(5)]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture
def root(s3: S3Server) -> str:
    return f"s3://{s3.bucket('d-' + secrets.token_hex(4))}/shunter"


def _dataset(root: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    src = tmp_path / "ds"
    src.mkdir()
    (src / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    digest, _ = publish_object(src, root)
    entry = {
        "uri": storage.join(root, storage.object_dir(digest)),
        "digest": digest,
        "kind": "dataset",
        "format": "jsonl",
        "file": "train.jsonl",
    }
    return digest, entry


def _model(root: str, tmp_path: Path) -> dict[str, Any]:
    src = tmp_path / "mdl"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text('{"model_type": "bert"}')
    (src / "sub" / "weights.bin").write_bytes(b"\x01" * 5000)
    digest, _ = publish_object(src, root)
    return {
        "uri": storage.join(root, storage.object_dir(digest)),
        "digest": digest,
        "kind": "model",
    }


def _node(tmp_path: Path, root: str, name: str = "node") -> NodeInputs:
    return NodeInputs(ObjectCache(tmp_path / name), tokenized=tokenized_root(root), settle_s=0.1)


def test_references_become_local_paths(root: str, tmp_path: Path) -> None:
    _, ds = _dataset(root, tmp_path)
    model = _model(root, tmp_path)
    inputs = {"ds-abc": ds, "mdl-xyz": model}
    spec = {
        "model": {"name_or_path": "mdl-xyz", "task": "causal-lm"},
        "data": {"train": {"dataset": "ds-abc"}, "eval": {"dataset": "ds-abc"}},
    }
    node = _node(tmp_path, root)
    out = localize(spec, inputs, node)
    model_dir = Path(out["model"]["name_or_path"])
    assert (model_dir / "sub" / "weights.bin").read_bytes() == b"\x01" * 5000  # fetched now
    train = out["data"]["train"]
    assert train["format"] == "jsonl" and "dataset" not in train
    path = Path(train["path"])
    assert not path.exists()  # a dataset is fetched only when read
    sha = json.loads(storage.read_bytes(storage.join(ds["uri"], "manifest.json")))
    assert node.content_id(str(path)) == sha["files"]["train.jsonl"]["sha256"]
    node.materialize(str(path))
    assert [json.loads(line) for line in path.read_text().splitlines()] == ROWS
    assert spec["data"]["train"] == {"dataset": "ds-abc"}  # the caller's spec is not changed


def test_a_listed_uri_is_checked_against_size_and_etag(
    s3: S3Server, root: str, tmp_path: Path
) -> None:
    bucket = root.split("/")[2]
    client = s3.client()
    files = []
    for name in ("a.jsonl", "b.jsonl"):
        body = json.dumps(ROWS[0]).encode() + b"\n"
        client.put_object(Bucket=bucket, Key=f"raw/{name}", Body=body)
        head = client.head_object(Bucket=bucket, Key=f"raw/{name}")
        files.append({"uri": f"s3://{bucket}/raw/{name}", "size": len(body), "etag": head["ETag"]})
    ref = f"s3://{bucket}/raw/*.jsonl"
    inputs = {ref: {"kind": "uri", "format": "jsonl", "files": files}}
    spec = {"data": {"train": {"uri": ref}}}
    node = _node(tmp_path, root)
    out = localize(spec, inputs, node)
    folder = Path(out["data"]["train"]["path"])
    node.materialize(str(folder))
    assert sorted(p.name for p in folder.iterdir()) == ["a.jsonl", "b.jsonl"]
    # The bucket's object changed after submit (same size, other bytes): its ETag no longer
    # matches what the listing recorded.
    client.put_object(Bucket=bucket, Key="raw/b.jsonl", Body=b"X" * files[1]["size"])
    fresh = _node(tmp_path, root, "fresh")
    out = localize(spec, inputs, fresh)
    with pytest.raises(DataCorrupt, match=r"b\.jsonl does not match its ETag") as err:
        fresh.materialize(out["data"]["train"]["path"])
    assert classify(err.value).type == "data_corrupt"


def test_a_corrupt_object_in_the_bucket_names_it(s3: S3Server, root: str, tmp_path: Path) -> None:
    _, ds = _dataset(root, tmp_path)
    bucket, key = ds["uri"].removeprefix("s3://").split("/", 1)
    body = s3.client().get_object(Bucket=bucket, Key=f"{key}/train.jsonl")["Body"].read()
    s3.client().put_object(Bucket=bucket, Key=f"{key}/train.jsonl", Body=body[::-1])
    node = _node(tmp_path, root)
    out = localize({"data": {"train": {"dataset": "ds-bad"}}}, {"ds-bad": ds}, node)
    with pytest.raises(DataCorrupt, match="ds-bad") as err:
        node.materialize(out["data"]["train"]["path"])
    info = classify(err.value)
    assert info.type == "data_corrupt" and "ds-bad" in info.message
    assert node.cache.usage() == {}


def test_tokenised_data_is_claimed_published_and_fetched_through_the_bucket(
    root: str, tmp_path: Path
) -> None:
    a, b = _node(tmp_path, root, "a"), _node(tmp_path, root, "b")
    assert a.fetch_tokenized("k1") is None
    with a.claim_tokenized("k1") as mine:
        assert mine
        with b.claim_tokenized("k1") as theirs:
            assert not theirs  # a's claim is live in the bucket
        built = tmp_path / "built"
        built.mkdir()
        (built / "data-00000-of-00001.arrow").write_bytes(b"tokens" * 100)
        (built / "dataset_info.json").write_text("{}")
        local = a.publish_tokenized("k1", built)
    assert (local / "dataset_info.json").exists() and not built.exists()  # adopted, not fetched
    assert a.cache.fetched_bytes == 0
    assert not storage.exists(storage.join(tokenized_root(root), "k1.claim"))  # released
    got = b.fetch_tokenized("k1")
    assert got is not None
    assert (got / "data-00000-of-00001.arrow").read_bytes() == b"tokens" * 100
    assert b.cache.fetched_bytes == 602


def test_a_node_copy_the_store_lacks_is_uploaded_for_the_other_nodes(
    s3: S3Server, root: str, tmp_path: Path
) -> None:
    """Rank 0 on a node that cached the key skips building it; the store must still hold it
    for the ranks on the other nodes (here: a second bucket, as in the private-disk e2e,
    and a store copy that was deleted)."""
    a = _node(tmp_path, root, "a")
    built = tmp_path / "built"
    (built / "sub").mkdir(parents=True)
    (built / "data.arrow").write_bytes(b"tokens" * 100)
    (built / "sub" / "state.json").write_text("{}")
    a.publish_tokenized("k3", built)
    other = f"s3://{s3.bucket('d-' + secrets.token_hex(4))}/shunter"
    a_other = NodeInputs(a.cache, tokenized=tokenized_root(other), settle_s=0.1)
    fresh = _node(tmp_path, other, "fresh")
    assert fresh.fetch_tokenized("k3") is None  # the second store has never held it
    assert a_other.fetch_tokenized("k3") == a.cache.path("tok-k3")  # the node's copy ...
    got = fresh.fetch_tokenized("k3")  # ... is now in the store, whole and verified
    assert got is not None and (got / "data.arrow").read_bytes() == b"tokens" * 100
    assert (got / "sub" / "state.json").read_text() == "{}"
    assert not (a.cache.root / "republish").exists() or not any(
        (a.cache.root / "republish").iterdir()
    )
    # The first store's copy deleted: the node that still caches it puts it back.
    storage.delete_tree(storage.join(tokenized_root(root), "k3"))
    assert a.fetch_tokenized("k3") is not None
    assert _node(tmp_path, root, "b").fetch_tokenized("k3") is not None


def test_the_driver_checks_stored_objects_before_workers_start(
    s3: S3Server, root: str, tmp_path: Path
) -> None:
    from worker.driver import preflight_inputs

    _, ds = _dataset(root, tmp_path)
    assert preflight_inputs({"ds-ok": ds}) is None
    assert preflight_inputs(None) is None
    bucket, key = ds["uri"].removeprefix("s3://").split("/", 1)
    s3.client().delete_object(Bucket=bucket, Key=f"{key}/manifest.json")
    problem = preflight_inputs({"ds-gone": ds})
    assert problem is not None and problem.type == "data_corrupt" and "ds-gone" in problem.message


def test_the_training_function_reads_the_store_beside_the_jobs() -> None:
    from worker.train_fn import _node_inputs

    assert _node_inputs(None, None, "/st/job-1") is None  # a shared disk, no stored inputs
    node = _node_inputs("s3://b/pre/job-1", None, "/tmp/stage/job-1/attempt-0")
    assert node is not None and node.tokenized == "s3://b/pre/.cache/tokenized"
    shared = _node_inputs(None, {"ds-a": {}}, "/st/job-1")
    assert shared is not None and shared.tokenized == "/st/.cache/tokenized"


def test_a_corrupt_tokenised_copy_is_dropped_not_fatal(root: str, tmp_path: Path) -> None:
    a, b = _node(tmp_path, root, "a"), _node(tmp_path, root, "b")
    built = tmp_path / "built"
    built.mkdir()
    (built / "data.arrow").write_bytes(b"tokens" * 100)
    a.publish_tokenized("k2", built)
    storage.write_bytes(storage.join(tokenized_root(root), "k2", "data.arrow"), b"x" * 600)
    assert b.fetch_tokenized("k2") is None  # the job builds it again
    assert storage.list_files(storage.join(tokenized_root(root), "k2")) == []


def test_a_listing_without_etags_as_submit_stores_it(
    s3: S3Server, root: str, tmp_path: Path
) -> None:
    """The service lists ``uri`` inputs with sizes only: each file's modification time then
    stamps its version, so a file rewritten after submit is another cache and tokenising key;
    several parquet files become one folder trainer_core reads in a fixed order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer_core.formats import read_local

    bucket = root.split("/")[2]
    files = []
    for i in range(2):
        local = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"text": [f"a{i}", f"b{i}"], "label": [0, 1]}), local)
        uri = f"s3://{bucket}/pq/part-{i}.parquet"
        storage.write_bytes(uri, local.read_bytes())
        files.append({"uri": uri, "size": local.stat().st_size})
    ref = f"s3://{bucket}/pq/*.parquet"
    inputs = {ref: {"kind": "uri", "format": "parquet", "delimiter": None, "files": files}}
    node = _node(tmp_path, root)
    train = localize({"data": {"train": {"uri": ref}}}, inputs, node)["data"]["train"]
    assert train == {"path": train["path"], "format": "parquet"}
    first_id = node.content_id(train["path"])
    assert first_id is not None
    node.materialize(train["path"])
    ds = read_local(train["path"], "parquet", fields=["text"])
    assert ds["text"] == ["a0", "b0", "a1", "b1"]
    time.sleep(1.1)  # S3 keeps modification times to the second
    storage.write_bytes(files[1]["uri"], (tmp_path / "part-1.parquet").read_bytes())
    rewritten = _node(tmp_path, root, "n2")
    path = localize({"data": {"train": {"uri": ref}}}, inputs, rewritten)["data"]["train"]["path"]
    assert rewritten.content_id(path) not in (None, first_id)  # same bytes, a new version
    storage.delete_tree(files[1]["uri"])
    with pytest.raises(DataCorrupt, match=r"part-1\.parquet is missing"):
        _node(tmp_path, root, "n3").dataset(ref, inputs[ref])


def test_the_localized_spec_is_a_valid_job_spec(root: str, tmp_path: Path) -> None:
    """What the training function validates after localizing (``JobSpec.model_validate``):
    the submitted spec's references, now local paths."""
    from shunter.jobspec import JobSpec

    _, ds = _dataset(root, tmp_path)
    model = _model(root, tmp_path)
    spec = {
        "name": "objects",
        "model": {"name_or_path": "mdl-xyzxyz1234", "task": "causal-lm"},
        "data": {"train": {"dataset": "ds-abcdefgh12"}, "text_field": "text", "max_length": 32},
        "resources": {"num_workers": 1, "cpus_per_worker": 1, "gpus_per_worker": 0},
    }
    JobSpec.model_validate(spec)  # the stored form validates
    out = localize(
        spec,
        {"ds-abcdefgh12": {**ds, "delimiter": None}, "mdl-xyzxyz1234": model},
        _node(tmp_path, root),
    )
    typed = JobSpec.model_validate(out)
    assert typed.data.train.path is not None and typed.data.train.path.endswith("train.jsonl")
    assert typed.data.train.format == "jsonl" and typed.data.train.dataset is None
    assert Path(str(typed.model.name_or_path), "config.json").is_file()
