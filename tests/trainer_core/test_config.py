"""TrainConfig.from_spec: DESIGN.md field names in, typed config out, clear errors."""

from __future__ import annotations

import pytest
import torch

from trainer_core.config import ConfigError, TrainConfig

BASE = {
    "name": "job",  # sections trainer_core does not read are ignored
    "resources": {"num_workers": 2},
    "model": {
        "name_or_path": "/m",
        "task": "sequence-classification",
        "num_labels": 2,
        "lora": {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["query"]},
    },
    "data": {
        "train": {"path": "d/train.tsv", "format": "csv", "delimiter": "\t"},
        "eval": {"hub": "glue", "config": "sst2", "split": "validation"},
        "text_field": "sentence",
        "label_field": "label",
    },
    "training": {
        "max_steps": 10,
        "warmup_ratio": 0.1,
        "eval_strategy": "steps",
        "eval_steps": 5,
        "save_steps": 5,
        "metric_for_best_model": "accuracy",
        "save_total_limit": None,
    },
    "distributed": {"strategy": "fsdp", "fsdp": {"sharding": "shard_grad_op"}},
}


def _spec(**sections: dict) -> dict:
    spec = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for name, values in sections.items():
        spec[name] = {**spec[name], **values}
    return spec


def test_from_spec_reads_every_section() -> None:
    cfg = TrainConfig.from_spec(_spec())
    assert cfg.model.lora is not None and cfg.model.lora.target_modules == ["query"]
    assert cfg.data.train.resolved_format == "csv" and cfg.data.train.delimiter == "\t"
    assert cfg.data.eval is not None and cfg.data.eval.hub == "glue"
    assert cfg.training.max_steps == 10 and cfg.training.save_total_limit is None
    assert cfg.training.best_metric_name == "eval_accuracy" and cfg.training.higher_is_better
    assert cfg.parallel.strategy == "fsdp" and cfg.parallel.fsdp_sharding == "shard_grad_op"


def test_unknown_key_names_it_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"training\.learning_rat.*did you mean 'learning_rate'"):
        TrainConfig.from_spec(_spec(training={"learning_rat": 1e-3}))
    with pytest.raises(ConfigError, match=r"model\.lora\.rank"):
        TrainConfig.from_spec(_spec(model={"lora": {"rank": 4}}))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only error")
def test_fp16_on_cpu_says_what_to_do() -> None:
    with pytest.raises(ConfigError, match="fp16 needs a CUDA device; use bf16 or fp32 on CPU"):
        TrainConfig.from_spec(_spec(training={"fp16": True}))


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("model", {"task": "regression"}, "model.task 'regression' unknown"),
        ("data", {"packing": True}, "packing applies to causal-lm only"),
        ("training", {"optim": "adam"}, "training.optim 'adam'"),
        ("training", {"bf16": True, "fp16": True}, "at most one"),
        (
            "training",
            {"load_best_model_at_end": True, "save_strategy": "epoch"},
            "save_strategy equal to eval_strategy",
        ),
        ("data", {"train": {"path": "x.xlsx"}}, "set `format`"),
    ],
)
def test_cross_field_errors(section: str, values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_spec(_spec(**{section: values}))
