"""Path resolution inside data roots (real tmp dirs and symlinks) and gang-fit resource checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobspec"))

from spec_cases import GOOD_SPEC, set_path, write_data_root

from service.jobs.admission import resource_errors, validate_spec
from shunter.jobspec import FieldError, SpecError


@pytest.fixture
def two_roots(tmp_path: Path) -> tuple[Path, Path]:
    first = write_data_root(tmp_path / "first")
    second = tmp_path / "second"
    (second / "only-here").mkdir(parents=True)
    (second / "only-here" / "train.csv").write_text("sentence,label\nok,1\n")
    (second / "train.csv").write_text("sentence,label\nshadowed,1\n")
    return first.resolve(), second.resolve()


def _data_path(spec_path: str, roots: list[Path]) -> str | None:
    raw = set_path(GOOD_SPEC, data__train={"path": spec_path})
    return validate_spec(raw, data_roots=roots).data.train.path


def _error(raw: dict[str, object], roots: list[Path]) -> FieldError:
    with pytest.raises(SpecError) as info:
        validate_spec(raw, data_roots=roots)
    assert len(info.value.errors) == 1, info.value.errors
    return info.value.errors[0]


def test_relative_paths_try_roots_in_order(two_roots: tuple[Path, Path]) -> None:
    first, second = two_roots
    assert _data_path("train.csv", [first, second]) == str(first / "train.csv")
    assert _data_path("train.csv", [second, first]) == str(second / "train.csv")
    # The model dir is only in the first root, the data only in the second: each is found.
    assert _data_path("only-here/train.csv", [first, second]) == str(second / "only-here/train.csv")


def test_absolute_path_inside_a_root_is_kept(two_roots: tuple[Path, Path]) -> None:
    first, second = two_roots
    path = str(second / "only-here" / "train.csv")
    assert _data_path(path, [first, second]) == path


def test_symlink_escaping_the_root_is_rejected(
    tmp_path: Path, two_roots: tuple[Path, Path]
) -> None:
    first, _ = two_roots
    secret = tmp_path / "outside" / "secret.csv"
    secret.parent.mkdir()
    secret.write_text("sentence,label\nx,1\n")
    (first / "escape.csv").symlink_to(secret)
    err = _error(set_path(GOOD_SPEC, data__train={"path": "escape.csv"}), [first])
    assert err.loc == "data.train.path"
    # The message names the allowed roots but never the resolved path (issue 10: a path
    # error must not reveal what exists outside the roots).
    assert str(secret) not in err.message
    assert f"outside the allowed data roots [{first}]" in err.message


def test_symlinked_directory_escape_is_rejected(
    tmp_path: Path, two_roots: tuple[Path, Path]
) -> None:
    first, _ = two_roots
    outside_model = tmp_path / "elsewhere" / "model"
    outside_model.mkdir(parents=True)
    (outside_model / "config.json").write_text("{}")
    (first / "linked-model").symlink_to(outside_model, target_is_directory=True)
    err = _error(set_path(GOOD_SPEC, model__name_or_path="linked-model"), [first])
    assert (err.loc, "outside the allowed data roots" in err.message) == (
        "model.name_or_path",
        True,
    )


def test_symlink_into_another_allowed_root_is_fine(two_roots: tuple[Path, Path]) -> None:
    first, second = two_roots
    (first / "via-link.csv").symlink_to(second / "only-here" / "train.csv")
    assert _data_path("via-link.csv", [first, second]) == str(second / "only-here" / "train.csv")


def test_dot_dot_escape_is_rejected(tmp_path: Path, two_roots: tuple[Path, Path]) -> None:
    first, _ = two_roots
    (tmp_path / "loose.csv").write_text("sentence,label\nx,1\n")
    err = _error(set_path(GOOD_SPEC, data__train={"path": "../loose.csv"}), [first])
    assert err.loc == "data.train.path"
    assert "outside the allowed data roots" in err.message
    assert str(tmp_path / "loose.csv") not in err.message


def test_dangling_symlink_does_not_exist(two_roots: tuple[Path, Path]) -> None:
    first, _ = two_roots
    (first / "dangling.csv").symlink_to(first / "gone.csv")
    err = _error(set_path(GOOD_SPEC, data__train={"path": str(first / "dangling.csv")}), [first])
    assert err.loc == "data.train.path"
    assert "does not exist in any data root" in err.message


def test_hub_ids_are_kept_only_for_models(two_roots: tuple[Path, Path]) -> None:
    first, _ = two_roots
    raw = set_path(GOOD_SPEC, model={"name_or_path": "bert-base-uncased", "tokenizer": "org/tok"})
    spec = validate_spec(raw, data_roots=[first])
    assert (spec.model.name_or_path, spec.model.tokenizer) == ("bert-base-uncased", "org/tok")
    # Explicitly local strings are never hub ids.
    for local in ("./org/model", "../model", "/models/minilm"):
        err = _error(set_path(GOOD_SPEC, model__name_or_path=local), [first])
        assert err.loc == "model.name_or_path" and "does not exist" in err.message
    # Not hub-shaped: more than one slash, "..", "--", spaces.
    for odd in ("a/b/c", "a..b", "a--b", "my model"):
        err = _error(set_path(GOOD_SPEC, model__tokenizer=odd), [first])
        assert err.loc == "model.tokenizer"
    # A data path is a file; the hub form of a dataset is {hub: ...}.
    err = _error(set_path(GOOD_SPEC, data__train={"path": "glue.csv"}), [first])
    assert err.loc == "data.train.path"


def test_local_model_wins_over_hub_reading(two_roots: tuple[Path, Path]) -> None:
    first, _ = two_roots
    (first / "org" / "name").mkdir(parents=True)
    (first / "org" / "name" / "config.json").write_text('{"num_attention_heads": 2}')
    spec = validate_spec(set_path(GOOD_SPEC, model__name_or_path="org/name"), data_roots=[first])
    assert spec.model.name_or_path == str(first / "org" / "name")


def test_no_roots_configured(two_roots: tuple[Path, Path]) -> None:
    with pytest.raises(SpecError) as info:
        validate_spec(GOOD_SPEC, data_roots=[])
    locs = [e.loc for e in info.value.errors]
    assert locs == ["data.train.path", "data.eval.path"]  # the model reads as a hub id
    assert "(none configured)" in info.value.errors[0].message


def test_unreadable_model_config(two_roots: tuple[Path, Path]) -> None:
    first, _ = two_roots
    (first / "broken").mkdir()
    (first / "broken" / "config.json").write_text("{not json")
    err = _error(set_path(GOOD_SPEC, model__name_or_path="broken"), [first])
    assert err.loc == "model.name_or_path" and "cannot read" in err.message


# --- resources: can the gang ever fit? ---------------------------------------------------

_CPU_NODE = (2.0, 0.0)
_GPU_NODE = (16.0, 4.0)


@pytest.mark.parametrize(
    ("resources", "nodes", "fits"),
    [
        ({"num_workers": 2, "gpus_per_worker": 0, "cpus_per_worker": 1}, [_CPU_NODE], True),
        ({"num_workers": 3, "gpus_per_worker": 0, "cpus_per_worker": 1}, [_CPU_NODE], False),
        ({"num_workers": 4, "gpus_per_worker": 0, "cpus_per_worker": 0.5}, [_CPU_NODE], True),
        # 0.1 * 3 is 0.30000000000000004 in floats; three 0.1-CPU workers fit on 0.3 CPUs.
        ({"num_workers": 3, "gpus_per_worker": 0, "cpus_per_worker": 0.1}, [(0.3, 0.0)], True),
        ({"num_workers": 1, "gpus_per_worker": 1, "cpus_per_worker": 1}, [_CPU_NODE], False),
        ({"num_workers": 8, "gpus_per_worker": 1, "cpus_per_worker": 2}, [_GPU_NODE] * 2, True),
        ({"num_workers": 9, "gpus_per_worker": 1, "cpus_per_worker": 2}, [_GPU_NODE] * 2, False),
        # Two half-nodes do not make one: a gang's 3 GPU workers do not fit on 2 GPUs.
        ({"num_workers": 3, "gpus_per_worker": 1, "cpus_per_worker": 1}, [(8.0, 2.0)], False),
        # CPUs bound GPU workers too: 4 GPUs but 6 CPUs fit only 3 workers of 2 CPUs.
        ({"num_workers": 4, "gpus_per_worker": 1, "cpus_per_worker": 2}, [(6.0, 4.0)], False),
        ({"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1}, [], False),
    ],
)
def test_resource_fit(
    resources: dict[str, float], nodes: list[tuple[float, float]], fits: bool, tmp_path: Path
) -> None:
    root = write_data_root(tmp_path / "root")
    spec = validate_spec(set_path(GOOD_SPEC, resources=resources), data_roots=[root])
    errors = resource_errors(spec, nodes=nodes)
    assert (errors == []) is fits
    if not fits:
        assert [e.loc for e in errors] == ["resources"]
        assert "can never fit" in errors[0].message


def test_resource_error_says_what_the_cluster_has(tmp_path: Path) -> None:
    root = write_data_root(tmp_path / "root")
    raw = set_path(
        GOOD_SPEC, resources={"num_workers": 2, "gpus_per_worker": 1, "cpus_per_worker": 1}
    )
    spec = validate_spec(raw, data_roots=[root])
    (err,) = resource_errors(spec, nodes=[(2.0, 0.0)])
    assert err.message == (
        "2 workers x (1 CPU, 1 GPU) can never fit: at most 0 such worker(s) fit, each on one"
        " node; the cluster has 1 node(s): 2 CPU/0 GPU"
    )
    (err,) = resource_errors(spec, nodes=[(1.0, 0.0)] * 10)
    assert err.message.endswith("1 CPU/0 GPU and 2 more")
