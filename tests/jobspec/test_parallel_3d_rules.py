"""Submit-time rules for pipeline and context parallelism (``shunter.jobspec.topology``):
each bad combination is one error naming its field, with the fix in the message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spec_cases import GOOD_SPEC, set_path, without, write_data_root

from service.jobs.admission import validate_spec
from shunter.jobspec import FieldError, SpecError

_LM = {"task": "causal-lm", "num_labels": None, "config_overrides": {"num_hidden_layers": 4}}
_LM_DATA = {"train": {"path": "corpus.txt"}, "eval": None, "label_field": None}
PP = "distributed.pipeline_parallel_size"
CP = "distributed.context_parallel_size"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_data_root(tmp_path_factory.mktemp("roots") / "root")


def _lm(**changes: Any) -> dict[str, Any]:
    base = set_path(GOOD_SPEC, model=_LM, data=_LM_DATA, resources__num_workers=4)
    return set_path(base, **changes)


def _pp(pp: int = 2, **changes: Any) -> dict[str, Any]:
    changes = {"training__gradient_accumulation_steps": 2, **changes}
    return _lm(distributed__pipeline_parallel_size=pp, **changes)


def _errors(raw: dict[str, Any], root: Path) -> list[FieldError]:
    with pytest.raises(SpecError) as info:
        validate_spec(raw, data_roots=[root])
    return info.value.errors


@pytest.mark.parametrize(
    "raw",
    [
        _pp(),
        _pp(distributed__pipeline_schedule="gpipe", training__gradient_accumulation_steps=1),
        _pp(4, distributed__pipeline_microbatches=4, training__per_device_train_batch_size=2),
    ],
    ids=["1f1b", "gpipe", "pp4-microbatches"],
)
def test_a_valid_pipeline_layout_is_accepted(raw: dict[str, Any], root: Path) -> None:
    spec = validate_spec(raw, data_roots=[root])
    assert spec.distributed.pipeline_parallel_size == raw["distributed"]["pipeline_parallel_size"]


def _cp(cp: int = 2, **changes: Any) -> dict[str, Any]:
    return _lm(distributed__context_parallel_size=cp, resources__gpus_per_worker=1, **changes)


@pytest.mark.parametrize(
    "raw",
    [
        _cp(),
        _cp(4, data__max_length=128),
        _cp(distributed__strategy="fsdp"),
        _cp(distributed__strategy="fsdp", distributed__fsdp__sharding="shard_grad_op"),
        _cp(distributed__strategy="fsdp+tp", distributed__tensor_parallel_size=2),
        _cp(
            distributed__strategy="fsdp+tp",
            distributed__tensor_parallel_size=2,
            resources__num_workers=8,
            distributed__fsdp__sharding="shard_grad_op",
        ),
    ],
    ids=["ddp-2x2", "ddp-1x4", "fsdp-full-shard", "fsdp-shard-grad-op", "3d-1x2x2", "3d-2x2x2"],
)
def test_a_valid_context_parallel_layout_is_accepted(raw: dict[str, Any], root: Path) -> None:
    spec = validate_spec(raw, data_roots=[root])
    cp = raw["distributed"]["context_parallel_size"]
    assert spec.distributed.context_parallel_size == cp
    assert spec.resources.gpus_per_worker == 1  # GPU nodes only (the scheduler's gang fit)


def test_the_defaults_are_one_stage_and_no_context_split(root: Path) -> None:
    spec = validate_spec(_lm(), data_roots=[root])
    d = spec.distributed
    assert (d.pipeline_parallel_size, d.context_parallel_size) == (1, 1)
    assert (d.pipeline_schedule, d.pipeline_microbatches) == ("1f1b", None)


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("pp-not-dividing-workers", _pp(3, model__config_overrides={"num_hidden_layers": 3},
     distributed__pipeline_schedule="gpipe"), PP,
     "must divide resources.num_workers (4)"),
    ("pp-not-dividing-layers", _pp(2, model__config_overrides={"num_hidden_layers": 3}), PP,
     "must divide the decoder layers"),
    ("pp-not-dividing-local-config-layers", without(_pp(4, distributed__pipeline_schedule="gpipe"),
     "model.config_overrides.num_hidden_layers"), PP, "decoder layers (num_hidden_layers 2)"),
    ("pp-with-fsdp", _pp(distributed__strategy="fsdp"), PP, "strategy ddp only"),
    ("pp-with-deepspeed", _pp(distributed__strategy="deepspeed"), PP, "strategy ddp only"),
    ("pp-with-tp", _pp(distributed__strategy="fsdp+tp", distributed__tensor_parallel_size=2), PP,
     "strategy ddp only"),
    ("pp-with-lora", _pp(model__lora={"r": 4}), PP, "remove model.lora"),
    ("pp-not-causal-lm", set_path(GOOD_SPEC, resources__num_workers=4,
     distributed__pipeline_parallel_size=2, distributed__pipeline_schedule="gpipe",
     data__eval=None), PP, "causal-lm models only"),
    ("pp-1f1b-too-few-microbatches", _pp(training__gradient_accumulation_steps=1),
     "distributed.pipeline_microbatches", "at least pipeline_parallel_size (2)"),
    ("pp-microbatches-not-dividing-rows", _pp(distributed__pipeline_microbatches=3,
     training__per_device_train_batch_size=1), "distributed.pipeline_microbatches",
     "per_device_train_batch_size x gradient_accumulation_steps = 2); 3 does not"),
    ("pp-with-fp16", _pp(training__fp16=True, resources__gpus_per_worker=1), "training.fp16",
     "no fp16 grad scaler across pipeline stages"),
    ("pp-with-eval", _pp(data__eval={"path": "corpus.txt"}), "data.eval",
     "remove data.eval or use pipeline_parallel_size: 1"),
    ("pp-with-galore", _pp(training__optim="galore_adamw",
     training__optim_target_modules=["q_proj"]), "training.optim",
     "not tested on pipeline stages"),
    ("pp-with-tied-embeddings", _pp(model__config_overrides={"num_hidden_layers": 4,
     "tie_word_embeddings": True}), PP, "tie_word_embeddings: false"),
    ("pp-schedule-without-pp", _lm(distributed__pipeline_schedule="gpipe"),
     "distributed.pipeline_schedule", "pipeline_parallel_size > 1"),
    ("pp-microbatches-without-pp", _lm(distributed__pipeline_microbatches=4),
     "distributed.pipeline_microbatches", "pipeline_parallel_size > 1"),
    ("cp-on-cpu", _lm(distributed__context_parallel_size=2), CP,
     "needs CUDA (torch's context_parallel runs ring attention on the CUDA SDPA kernels only)"),
    ("cp-not-dividing-max-length", _lm(distributed__context_parallel_size=2,
     resources__gpus_per_worker=1, data__max_length=130), CP,
     "2 x context_parallel_size (4) must divide data.max_length (130)"),
    ("cp-not-dividing-workers", _lm(distributed__context_parallel_size=3,
     resources__gpus_per_worker=1, data__max_length=132), CP,
     "must divide resources.num_workers (4)"),
    ("cp-with-deepspeed", _cp(distributed__strategy="deepspeed"), CP,
     "runs under strategy ddp, fsdp or fsdp+tp, not 'deepspeed'"),
    ("cp-with-strategy-tp", _cp(distributed__strategy="tp", distributed__tensor_parallel_size=2),
     CP, "runs under strategy fsdp+tp"),
    ("3d-tp-x-cp-not-dividing-workers", _cp(distributed__strategy="fsdp+tp",
     distributed__tensor_parallel_size=2, resources__num_workers=6), CP,
     "tensor_parallel_size x context_parallel_size (4) must divide resources.num_workers (6)"),
    ("3d-on-cpu", _lm(distributed__context_parallel_size=2, distributed__strategy="fsdp+tp",
     distributed__tensor_parallel_size=2), CP, "needs CUDA"),
    ("3d-with-hybrid-shard", _cp(distributed__strategy="fsdp+tp",
     distributed__tensor_parallel_size=2, distributed__fsdp__sharding="hybrid_shard"),
     "distributed.fsdp.sharding", "use full_shard or shard_grad_op"),
    ("cp-with-hybrid-shard", _cp(distributed__strategy="fsdp",
     distributed__fsdp__sharding="hybrid_shard"), "distributed.fsdp.sharding",
     "use full_shard or shard_grad_op"),
    ("cp-elastic", _cp(resources__num_workers={"min": 2, "max": 4},
     training__gradient_accumulation_steps=12), CP,
     "must divide resources.num_workers (3)"),
    ("cp-with-eval", _cp(data__eval={"path": "corpus.txt"}), "data.eval",
     "remove data.eval or use context_parallel_size: 1"),
    ("cp-not-llama", _cp(model__config_overrides={"model_type": "gpt2"}), CP,
     "Llama-family models"),
    ("cp-with-pipeline", _cp(distributed__pipeline_parallel_size=2,
     training__gradient_accumulation_steps=2), PP,
     "pipeline and context parallelism together are not supported"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "raw", "loc", "phrase"), BAD, ids=[r[0] for r in BAD])
def test_bad_layout(name: str, raw: dict[str, Any], loc: str, phrase: str, root: Path) -> None:
    errors = _errors(raw, root)
    assert {e.loc for e in errors} == {loc}, errors
    assert any(phrase in e.message for e in errors), errors


def test_the_plan_of_a_pipeline_has_num_workers_over_pp_data_parallel_ranks(root: Path) -> None:
    from shunter.jobspec.plan import plan_for

    spec = validate_spec(_pp(training__per_device_train_batch_size=2), data_roots=[root])
    plan = plan_for(spec, param_count=1000, train_rows=64)
    assert plan.mesh == {"dp": 2, "pp": 2} and plan.data_parallel_size == 2
    assert plan.global_batch_size == 4 and plan.steps_per_epoch == 64 // (4 * 2)
    assert any(note.startswith("pipeline: ") for note in plan.notes)


def test_a_local_model_with_tied_embeddings_cannot_be_cut_into_stages(root: Path) -> None:
    config = json.loads((root / "tiny-llama" / "config.json").read_text())
    tied = root / "tied-llama"
    tied.mkdir(exist_ok=True)
    (tied / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    errors = _errors(_pp(model__name_or_path="tied-llama"), root)
    assert [e.loc for e in errors] == [PP] and "tie_word_embeddings" in errors[0].message, errors
    overrides = {"num_hidden_layers": 4, "tie_word_embeddings": False}
    untied = _pp(model__name_or_path="tied-llama", model__config_overrides=overrides)
    assert validate_spec(untied, data_roots=[root]).distributed.pipeline_parallel_size == 2


def test_the_plan_of_context_parallel_splits_the_sequence_and_shards_over_dp_x_cp(
    root: Path,
) -> None:
    from shunter.jobspec.plan import plan_for

    ddp = validate_spec(_cp(data__max_length=128), data_roots=[root])
    plan = plan_for(ddp, param_count=1000, train_rows=64)
    assert plan.mesh == {"dp": 2, "cp": 2} and plan.data_parallel_size == 2
    assert plan.context_parallel_size == 2
    assert plan.sequence_tokens_per_device == ddp.training.per_device_train_batch_size * 64
    assert plan.memory.params_bytes == 1000 * 4  # ddp: whole on every rank
    fsdp = validate_spec(_cp(distributed__strategy="fsdp"), data_roots=[root])
    plan = plan_for(fsdp, param_count=1000, train_rows=64)
    assert plan.memory.params_bytes == 1000 * 4 // 4  # sharded over dp x cp = 4 ranks
    assert any(note.startswith("context parallel: ") for note in plan.notes)
    one = plan_for(validate_spec(_lm(data__max_length=128), data_roots=[root]), param_count=1000)
    assert one.sequence_tokens_per_device == 2 * plan_for(ddp).sequence_tokens_per_device


def test_the_plan_of_a_3d_mesh_has_dp_cp_tp_and_shards_over_all_three(root: Path) -> None:
    from shunter.jobspec.plan import plan_for

    raw = _cp(distributed__strategy="fsdp+tp", distributed__tensor_parallel_size=2,
              resources__num_workers=8, data__max_length=128)  # fmt: skip
    spec = validate_spec(raw, data_roots=[root])
    plan = plan_for(spec, param_count=1600, train_rows=64)
    assert plan.mesh == {"dp": 2, "cp": 2, "tp": 2}
    assert (plan.data_parallel_size, plan.tensor_parallel_size, plan.context_parallel_size) == (
        2,
        2,
        2,
    )
    batch = spec.training.per_device_train_batch_size
    assert plan.sequence_tokens_per_device == batch * 128 // 2
    assert plan.global_batch_size == batch * 2  # the tp and cp ranks read the same rows
    # fp32 params: 4 B, sharded by FSDP over dp x cp = 4 ranks and by TP over 2.
    assert plan.memory.params_bytes == 1600 * 4 // (4 * 2)
    assert plan.memory.shard["param"] == 4 * 2
    assert any("sharded over dp x cp (4 ranks) x tp (2)" in note for note in plan.notes)
