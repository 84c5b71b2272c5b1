"""TrainConfig / ParallelConfig are projections of the one JobSpec: no defaults, rules or
error type of their own (the drift table of the one-JobSpec issue, case by case)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from shunter.jobspec import JobSpec, SpecError, validate
from trainer_core import __main__ as cli
from trainer_core.config import (
    TrainConfig,
    best_metric_key,
    clip_norm,
    eval_every,
    higher_is_better,
    local_spec,
)
from trainer_core.parallel import ParallelConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobspec"))

from spec_cases import GOOD_SPEC, set_path

BASE: dict[str, Any] = {
    "name": "job",
    "model": {
        "name_or_path": "/m",
        "task": "sequence-classification",
        "num_labels": 2,
        "lora": {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["query"]},
    },
    "data": {
        "train": {"path": "d/train.tsv"},
        "eval": {"hub": "glue", "config": "sst2", "split": "validation"},
        "text_field": "sentence",
        "label_field": "label",
    },
    "training": {
        "max_steps": 10,
        "eval_strategy": "steps",
        "eval_steps": 5,
        "save_steps": 5,
        "metric_for_best_model": "accuracy",
        "max_grad_norm": 0,
    },
    "distributed": {"strategy": "fsdp", "fsdp": {"sharding": "shard_grad_op"}},
    "resources": {"num_workers": 2, "gpus_per_worker": 0},
}


def test_sections_are_the_spec_and_helpers_read_them(tmp_path: Path) -> None:
    spec = validate(BASE)
    cfg = TrainConfig.from_spec(spec, output_dir=tmp_path)
    assert cfg.model is spec.model and cfg.training is spec.training and cfg.data is spec.data
    assert (cfg.data.train.format, cfg.data.train.delimiter) == ("csv", "\t")
    assert cfg.data.eval is not None and cfg.data.eval.split == "validation"
    t = cfg.training
    assert (clip_norm(t), eval_every(t), best_metric_key(t)) == (None, 5, "eval_accuracy")
    assert higher_is_better(t) is True
    assert cfg.tokenized_cache == tmp_path / ".cache" / "tokenized"


def test_parallel_config_is_a_projection() -> None:
    spec = validate(
        set_path(
            BASE,
            distributed={
                "strategy": "deepspeed",
                "deepspeed": {
                    "stage": 3,
                    "offload_param": True,
                    "config": {"train_micro_batch_size_per_gpu": "auto"},
                },
            },
            model={"lora": None},
            training={"bf16": True, "max_grad_norm": 0.5, "per_device_train_batch_size": 4},
        )
    )
    p = ParallelConfig.from_spec(spec)
    assert (p.strategy, p.deepspeed_stage, p.offload_param) == ("deepspeed", 3, True)
    assert p.deepspeed_config == {"train_micro_batch_size_per_gpu": "auto"}
    assert (p.bf16, p.max_grad_norm, p.micro_batch_size) == (True, 0.5, 4)
    # Keyword defaults are the spec's defaults (the bench builds one by hand).
    ddp = {"strategy": "ddp", "fsdp": {"sharding": "full_shard"}}
    default = ParallelConfig.from_spec(validate(set_path(BASE, distributed=ddp)))
    assert ParallelConfig(max_grad_norm=None) == default


@pytest.mark.parametrize(
    ("changes", "loc"),
    [
        ({"model": {"task": None}}, "model.task"),  # required, no trainer default
        ({"data": {"max_length": 1}}, "data.max_length"),  # was accepted, failed on workers
        ({"data": {"label_field": None}}, "data.label_field"),  # no "label" default
        ({"training": {"learning_rat": 1e-3}}, "training.learning_rat"),  # one did-you-mean
        ({"distributed": {"fsdp": {"shardng": "x"}}}, "distributed.fsdp.shardng"),
        ({"training": {"early_stopping_patience": 2}}, "training.early_stopping_patience"),
    ],
)
def test_spec_errors_are_the_one_error(changes: dict[str, Any], loc: str) -> None:
    raw = set_path(BASE, **changes)
    with pytest.raises(SpecError) as info:
        TrainConfig.from_spec(raw, output_dir="/tmp/x")
    assert info.value.errors[0].loc == loc


def test_perplexity_is_minimised() -> None:
    lm = set_path(
        GOOD_SPEC,
        model={"task": "causal-lm", "num_labels": None},
        data={"label_field": None},
        training={"metric_for_best_model": "perplexity"},
    )
    spec = validate(lm, service_mode=False)
    assert higher_is_better(spec.training) is False


def test_local_spec_takes_the_run_shape() -> None:
    spec = local_spec({k: v for k, v in BASE.items() if k != "name"}, world_size=4, cuda=False)
    assert (spec.name, spec.resources.num_workers, spec.resources.gpus_per_worker) == (
        "local",
        4,
        0,
    )
    with pytest.raises(SpecError, match="fp16 needs GPUs"):
        local_spec(set_path(BASE, training__fp16=True), world_size=1, cuda=False)


def test_output_dir_is_required_outside_the_service() -> None:
    with pytest.raises(SpecError, match=r"training\.output_dir"):
        TrainConfig.from_spec(validate(BASE))
    raw = set_path(BASE, training__output_dir="/tmp/run")
    assert TrainConfig.from_spec(raw).output_dir == Path("/tmp/run")


def test_cli_prints_every_error_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "model: {name_or_path: /m, task: causal-lm}\ndata: {train: a.txt, max_length: 1}\n"
        "resources: {num_workers: true}\n"
    )
    assert cli.main(["--spec", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "data.max_length: Input should be greater than or equal to 2" in err


def test_resolved_spec_round_trips_through_the_driver_payload() -> None:
    spec = validate(BASE)
    again = JobSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec
