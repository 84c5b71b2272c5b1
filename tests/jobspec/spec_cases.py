"""A table of bad JobSpecs, each breaking exactly one rule, for any test that validates specs.

``BAD_SPECS`` rows are ``(name, raw, loc, phrase)``: validating ``raw`` against a data root
made by ``write_data_root(root)`` must fail with ``loc`` as the first error's loc (and only
that loc) and ``phrase`` inside its message. The API test and the CLI's ``shunter validate``
test can reuse it to show both print the same ``format_spec_errors`` message.

Relative paths in the rows (``train.csv``, ``tiny-llama/``) exist in that root; nothing
here needs ``../shared`` or the network.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

__all__ = ["BAD_SPECS", "GOOD_SPEC", "set_path", "without", "write_data_root"]

# Attention heads of the fixture model: 6 (so TP 4 does not divide them), key/value heads 2.
_TINY_LLAMA_CONFIG = {
    "model_type": "llama",
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "vocab_size": 128,
}

# A BERT-family model: no tensor-parallel plan.
_TINY_BERT_CONFIG = {
    "model_type": "bert",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 128,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
}


def write_data_root(root: Path) -> Path:
    """Create the files the table's specs point at; return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.csv").write_text("sentence,label\ngood,1\nbad,0\n")
    (root / "eval.csv").write_text("sentence,label\nfine,1\n")
    (root / "train.dat").write_text("no suffix the format could be inferred from\n")
    (root / "corpus.txt").write_text("to be or not to be\n")
    model = root / "tiny-llama"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(_TINY_LLAMA_CONFIG))
    (root / "no-config-model").mkdir(exist_ok=True)
    bert = root / "tiny-bert"
    bert.mkdir(exist_ok=True)
    (bert / "config.json").write_text(json.dumps(_TINY_BERT_CONFIG))
    return root


GOOD_SPEC: dict[str, Any] = {
    "name": "case",
    "model": {"name_or_path": "tiny-llama", "task": "sequence-classification", "num_labels": 2},
    "data": {
        "train": {"path": "train.csv"},
        "eval": {"path": "eval.csv"},
        "text_field": "sentence",
        "label_field": "label",
    },
    "resources": {"num_workers": 2, "gpus_per_worker": 0, "cpus_per_worker": 1},
}

_LM = {"task": "causal-lm", "num_labels": None}
_LM_DATA = {"train": {"path": "corpus.txt"}, "eval": None, "label_field": None}


def set_path(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with keys set; ``training__max_steps=0`` sets training.max_steps.

    A dict value is merged into an existing dict (so ``model={"task": ...}`` keeps the rest).
    """
    out = copy.deepcopy(base)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if isinstance(value, dict) and isinstance(node.get(last), dict):
            node[last] = {**node[last], **value}
        else:
            node[last] = value
    return out


def without(base: dict[str, Any], dotted: str) -> dict[str, Any]:
    """A deep copy of ``base`` with the dotted key removed."""
    out = copy.deepcopy(base)
    *parents, last = dotted.split(".")
    node = out
    for key in parents:
        node = node[key]
    del node[last]
    return out


def _good(**changes: Any) -> dict[str, Any]:
    return set_path(GOOD_SPEC, **changes)


def _lm(**changes: Any) -> dict[str, Any]:
    return set_path(set_path(GOOD_SPEC, model=_LM, data=_LM_DATA), **changes)


def _best(**changes: Any) -> dict[str, Any]:
    best = {
        "load_best_model_at_end": True,
        "metric_for_best_model": "eval_loss",
        "eval_strategy": "steps",
        "eval_steps": 100,
        "save_strategy": "steps",
        "save_steps": 500,
    }
    return set_path(set_path(GOOD_SPEC, training=best), **changes)


def _tp(tp: int, workers: int, strategy: str = "tp", **changes: Any) -> dict[str, Any]:
    return _lm(
        distributed={"strategy": strategy, "tensor_parallel_size": tp},
        resources__num_workers=workers,
        **changes,
    )


BAD_SPECS: list[tuple[str, dict[str, Any], str, str]] = [
    # unknown keys, with did-you-mean
    ("unknown-top-key", set_path(GOOD_SPEC, nmae="x"), "nmae", "did you mean 'name'?"),
    ("unknown-training-key", _good(training__learning_rte=1e-3), "training.learning_rte",
     "did you mean 'learning_rate'?"),
    ("unknown-lora-key", _good(model__lora={"alpah": 16}), "model.lora.alpah",
     "did you mean 'alpha'?"),
    ("unknown-source-key", _good(data__train={"delimeter": ","}), "data.train.delimeter",
     "did you mean 'delimiter'?"),
    ("unknown-fsdp-key", _good(distributed={"fsdp": {"shardng": "full_shard"}}),
     "distributed.fsdp.shardng", "did you mean 'sharding'?"),
    ("unknown-key-no-match", _good(resources__zzz=1), "resources.zzz",
     "allowed: accelerator, cpus_per_worker, elastic_from, gpus_per_worker, num_workers"),
    ("alias-lr", _good(training__lr=1e-3), "training.lr", "did you mean 'learning_rate'?"),
    ("substring-gpus", _good(resources__gpus=1), "resources.gpus",
     "did you mean 'gpus_per_worker'?"),
    ("two-suggestions", _good(training__batch_size=8), "training.batch_size",
     "did you mean 'per_device_eval_batch_size' or 'per_device_train_batch_size'?"),
    # names, enums, types
    ("name-pattern", _good(name="Bad Name"), "name", "use lower-case letters"),
    ("name-too-long", _good(name="a" * 64), "name", "at most 63 characters"),
    ("task-missing", without(GOOD_SPEC, "model.task"), "model.task", "required"),
    ("task-enum", _good(model__task="summarization"), "model.task", "'causal-lm'"),
    ("eval-strategy-enum", _good(training__eval_strategy="sometimes"),
     "training.eval_strategy", "'steps'"),
    ("priority-enum", _good(priority="urgent"), "priority", "'high'"),
    ("int-not-a-number", _good(training__seed="abc"), "training.seed", "expected an integer"),
    # strict types: no coercion, and the message names the type expected
    ("workers-bool", _good(resources__num_workers=True), "resources.num_workers",
     "expected an integer, got the boolean true"),
    ("workers-string", _good(resources__num_workers="8"), "resources.num_workers",
     "expected an integer, got the string '8'"),
    ("workers-float", _good(resources__num_workers=2.0), "resources.num_workers",
     "expected an integer, got the number 2.0"),
    ("lr-string", _good(training__learning_rate="5e-5"), "training.learning_rate",
     "expected a number, got the string '5e-5'"),
    ("bf16-int", _good(training__bf16=1), "training.bf16", "expected true or false"),
    ("stage-bool", _good(distributed={"strategy": "deepspeed", "deepspeed": {"stage": True}}),
     "distributed.deepspeed.stage", "expected an integer, got the boolean true"),
    ("lora-target-shorthand", _good(model__lora={"target_modules": "all"}),
     "model.lora.target_modules", "'all-linear'"),
    ("path-control-char", _good(model__name_or_path="tiny\x00llama"), "model.name_or_path",
     "control characters"),
    # numeric bounds
    ("lr-zero", _good(training__learning_rate=0), "training.learning_rate", "greater than 0"),
    ("lr-huge", _good(training__learning_rate=11), "training.learning_rate",
     "less than or equal to 10"),
    ("lr-nan", _good(training__learning_rate=float("nan")), "training.learning_rate",
     "finite number"),
    ("batch-zero", _good(training__per_device_train_batch_size=0),
     "training.per_device_train_batch_size", "greater than or equal to 1"),
    ("batch-huge", _good(training__per_device_eval_batch_size=65537),
     "training.per_device_eval_batch_size", "less than or equal to 65536"),
    ("workers-zero", _good(resources__num_workers=0), "resources.num_workers",
     "greater than or equal to 1"),
    ("workers-huge", _good(resources__num_workers=1025), "resources.num_workers",
     "less than or equal to 1024"),
    ("gpus-huge", _good(resources__gpus_per_worker=65), "resources.gpus_per_worker",
     "less than or equal to 64"),
    ("cpus-zero", _good(resources__cpus_per_worker=0), "resources.cpus_per_worker",
     "greater than 0"),
    ("max-length-zero", _good(data__max_length=0), "data.max_length",
     "greater than or equal to 2"),
    ("max-length-one", _good(data__max_length=1), "data.max_length",
     "greater than or equal to 2"),
    ("max-steps-below", _good(training__max_steps=-2), "training.max_steps",
     "greater than or equal to -1"),
    ("seed-negative", _good(training__seed=-1), "training.seed", "greater than or equal to 0"),
    ("runtime-zero", _good(max_runtime_seconds=0), "max_runtime_seconds",
     "greater than or equal to 1"),
    ("delimiter-two-chars", _good(data__train={"delimiter": ";;"}), "data.train.delimiter",
     "at most 1 character"),
    # training length
    ("max-steps-zero", _good(training__max_steps=0), "training.max_steps", "0 trains nothing"),
    ("epochs-zero", _good(training__num_train_epochs=0), "training.num_train_epochs",
     "must be > 0 when max_steps is -1"),
    # precision
    ("bf16-and-fp16", _good(training={"bf16": True, "fp16": True}), "training.fp16",
     "cannot both be true"),
    ("fp16-on-cpu", _good(training__fp16=True), "training.fp16", "fp16 needs GPUs"),
    ("float16-params-on-cpu", _good(model__dtype="float16"), "model.dtype",
     "float16 parameters need GPUs"),
    # warmup, task fields
    ("warmup-both", _good(training={"warmup_steps": 10, "warmup_ratio": 0.1}),
     "training.warmup_ratio", "not both"),
    ("classification-no-label", _good(data__label_field=None), "data.label_field",
     "needs label_field"),
    ("classification-one-label", _good(model__num_labels=1), "model.num_labels",
     "num_labels >= 2"),
    ("token-classification-no-labels", _good(model={"task": "token-classification",
     "num_labels": None}), "model.num_labels", "token-classification needs num_labels >= 2"),
    ("lm-with-num-labels", _lm(model__num_labels=2), "model.num_labels",
     "only for classification tasks"),
    ("lm-with-label-field", _lm(data__label_field="label"), "data.label_field",
     "only for classification tasks"),
    ("packing-not-causal", _good(data__packing=True), "data.packing", "only for causal-lm"),
    ("text-pair-not-seqcls", _lm(data__text_pair_field="b"), "data.text_pair_field",
     "only for sequence-classification"),
    # model source
    ("no-model-source", without(GOOD_SPEC, "model.name_or_path"), "model.name_or_path",
     "required unless from_scratch"),
    ("scratch-no-model-type", _lm(model={"name_or_path": None, "from_scratch": True,
     "tokenizer": "tiny-llama"}), "model.config_overrides", "config_overrides.model_type"),
    ("scratch-no-tokenizer", _lm(model={"name_or_path": None, "from_scratch": True,
     "config_overrides": {"model_type": "llama"}}), "model.tokenizer",
     "required when model.name_or_path is omitted"),
    # evaluation and best model
    ("eval-without-data", _good(data__eval=None, training__eval_strategy="epoch"),
     "data.eval", "needs an eval dataset"),
    ("plateau-without-eval", _good(training__lr_scheduler_type="reduce_lr_on_plateau"),
     "training.lr_scheduler_type", "needs eval_strategy"),
    ("best-no-metric", _best(training__metric_for_best_model=None),
     "training.metric_for_best_model", "needs a metric"),
    ("best-unknown-metric", _best(training__metric_for_best_model="f1"),
     "training.metric_for_best_model", "is not reported for sequence-classification"),
    ("best-strategies-differ", _best(training__save_strategy="epoch"),
     "training.save_strategy", "save_strategy == eval_strategy"),
    ("best-save-not-multiple", _best(training__save_steps=250), "training.save_steps",
     "multiple of eval_steps (100)"),
    ("best-save-not-multiple-logging", _best(training={"eval_steps": None, "logging_steps": 30}),
     "training.save_steps", "multiple of eval_steps (30)"),
    ("best-eval-no", _best(training={"eval_strategy": "no", "save_strategy": "no"}),
     "training.eval_strategy", "needs eval_strategy steps or epoch"),
    ("early-stopping-alone", _good(training__early_stopping_patience=3),
     "training.early_stopping_patience", "needs load_best_model_at_end"),
    # parallelism
    ("tp-size-one", _tp(1, 2), "distributed.tensor_parallel_size", "needs >= 2"),
    ("tp-on-ddp", _good(distributed__tensor_parallel_size=2), "distributed.tensor_parallel_size",
     "must be 1 for strategy 'ddp'"),
    ("tp-not-dividing-workers", _tp(3, 4), "distributed.tensor_parallel_size",
     "must divide resources.num_workers (4)"),
    ("tp-not-dividing-heads", _tp(4, 4), "distributed.tensor_parallel_size",
     "num_attention_heads (6)"),
    ("tp-not-dividing-kv-heads", _tp(2, 2, model__config_overrides={"num_key_value_heads": 3}),
     "distributed.tensor_parallel_size", "num_key_value_heads (3)"),
    ("fsdp-tp-too-few-workers", _tp(2, 2, "fsdp+tp"), "resources.num_workers",
     "num_workers >= 2 x tensor_parallel_size (4)"),
    ("lora-with-tp", _tp(2, 2, model__lora={"r": 4}), "model.lora",
     "tensor parallelism"),
    ("peft-with-lora", _good(model__lora={"r": 4}, model__peft={"adapter": "ia3"}),
     "model.peft", "not both"),
    ("peft-with-tp", _tp(2, 2, model__peft={"adapter": "ia3"}), "model.peft",
     "tensor parallelism"),
    ("peft-unknown-adapter", _good(model__peft={"adapter": "adalora"}), "model.peft.adapter",
     "prefix_tuning"),
    ("prefix-merge", _good(model__peft={"adapter": "prefix_tuning", "merge_on_save": True}),
     "model.peft.merge_on_save", "no weights to merge"),
    ("prefix-target-modules", _good(model__peft={"adapter": "prefix_tuning",
     "target_modules": ["q_proj"]}), "model.peft.target_modules", "only for adapter ia3"),
    ("prefix-token-classification", _good(model={"task": "token-classification"},
     model__peft={"adapter": "prefix_tuning"}), "model.peft.adapter", "use ia3 or lora"),
    ("ia3-virtual-tokens", _good(model__peft={"adapter": "ia3", "num_virtual_tokens": 8}),
     "model.peft.num_virtual_tokens", "only for adapter prefix_tuning"),
    ("offload-param-stage2", _good(distributed={"strategy": "deepspeed",
     "deepspeed": {"stage": 2, "offload_param": True}}), "distributed.deepspeed.offload_param",
     "needs stage 3"),
    ("ds-config-disagrees", _good(distributed={"strategy": "deepspeed", "deepspeed": {
     "config": {"zero_optimization": {"stage": 3}}}}), "distributed.deepspeed.config",
     "zero_optimization.stage is 3 but the spec implies 2"),
    ("ds-config-precision", _good(distributed={"strategy": "deepspeed", "deepspeed": {
     "config": {"bf16": {"enabled": True}}}}), "distributed.deepspeed.config",
     "bf16.enabled is True but the spec implies False"),
    ("ds-config-batch", _good(distributed={"strategy": "deepspeed", "deepspeed": {
     "config": {"train_batch_size": 64}}}), "distributed.deepspeed.config",
     "train_batch_size is 64 but the spec implies 32"),
    # layout: what trainer_core cannot run (shunter.jobspec.topology)
    ("gpus-per-worker-two", _good(resources={"num_workers": 2, "gpus_per_worker": 2}),
     "resources.gpus_per_worker", "set gpus_per_worker: 1 and num_workers: 4"),
    # fsdp+tp runs every sharding (tests/trainer_core/test_matrix.py); hybrid groups are dp ranks.
    ("fsdp-tp-hybrid-size", _tp(2, 4, "fsdp+tp", distributed__fsdp={"sharding": "hybrid_shard",
     "hybrid_shard_size": 4}), "distributed.fsdp.hybrid_shard_size",
     "must divide num_workers / tensor_parallel_size (2)"),
    ("ds-offload-under-fsdp", _good(distributed={"strategy": "fsdp", "deepspeed": {
     "offload_param": True}}), "distributed.deepspeed.offload_param",
     "only for strategy deepspeed, not 'fsdp'; FSDP offloads with distributed.fsdp.cpu_offload"),
    ("ds-config-under-ddp", _good(distributed={"deepspeed": {"config": {
     "train_micro_batch_size_per_gpu": "auto"}}}), "distributed.deepspeed.config",
     "only for strategy deepspeed, not 'ddp'"),
    ("fsdp-offload-under-ddp", _good(distributed={"fsdp": {"cpu_offload": True}}),
     "distributed.fsdp.cpu_offload", "only for strategy fsdp or fsdp+tp, not 'ddp'"),
    ("fsdp-mixed-precision-under-ddp", _good(distributed={"fsdp": {"mixed_precision": "params"}},
     training__bf16=True), "distributed.fsdp.mixed_precision",
     "only for strategy fsdp or fsdp+tp, not 'ddp'"),
    ("fsdp-params-without-bf16", _good(distributed={"strategy": "fsdp", "fsdp": {
     "mixed_precision": "params"}}), "distributed.fsdp.mixed_precision",
     "set training.bf16 or training.fp16"),
    ("ds-mixed-precision-under-fsdp", _good(distributed={"strategy": "fsdp", "deepspeed": {
     "mixed_precision": "autocast"}}), "distributed.deepspeed.mixed_precision",
     "only for strategy deepspeed, not 'fsdp'"),
    ("ds-autocast-fp16", _good(distributed={"strategy": "deepspeed", "deepspeed": {
     "mixed_precision": "autocast"}}), "distributed.deepspeed.mixed_precision",
     "set training.bf16"),
    ("hybrid-size-not-hybrid", _good(distributed={"strategy": "fsdp", "fsdp": {
     "hybrid_shard_size": 2}}), "distributed.fsdp.hybrid_shard_size",
     "only with sharding hybrid_shard"),
    ("hybrid-size-not-dividing", _good(distributed={"strategy": "fsdp", "fsdp": {
     "sharding": "hybrid_shard", "hybrid_shard_size": 3}}),
     "distributed.fsdp.hybrid_shard_size", "must divide resources.num_workers (2)"),
    ("tp-on-gpt2-from-scratch", _tp(2, 2, model={"name_or_path": None, "from_scratch": True,
     "tokenizer": "tiny-llama", "config_overrides": {"model_type": "gpt2"}}),
     "model.config_overrides", "tensor-parallel plan only for Llama-style models"),
    ("tp-on-local-bert", _tp(2, 2, model__name_or_path="tiny-bert"), "model.name_or_path",
     "this model is 'bert'"),
    ("tp-on-hub-gpt2", _tp(2, 2, model__name_or_path="openai-community/gpt2"),
     "model.name_or_path", "this model is 'gpt2'"),
    ("fp16-float16-params", _good(model__dtype="float16", training__fp16=True,
     resources={"num_workers": 2, "gpus_per_worker": 1}), "model.dtype",
     "fp16 mixed precision needs float32 parameters"),
    # data sources
    ("source-both-forms", _good(data__train={"hub": "glue"}), "data.train",
     "belong to the hub form"),
    ("source-no-form", _good(data__train={"path": None}), "data.train", "give either path"),
    ("source-no-format", _good(data__train={"path": "train.dat"}), "data.train",
     "cannot infer format"),
    ("source-delimiter-json", _good(data__train={"path": "train.csv", "format": "json",
     "delimiter": ","}), "data.train", "delimiter is only for format csv"),
    ("source-bad-hub-id", _good(data__eval={"path": None, "hub": "not a dataset"}),
     "data.eval", "is not a dataset id"),
    # paths
    ("output-dir-in-service", _good(training__output_dir="/tmp/out"), "training.output_dir",
     "the service sets it"),
    ("data-path-missing", _good(data__train={"path": "missing.csv"}), "data.train.path",
     "does not exist in any data root"),
    ("model-outside-roots", _good(model__name_or_path="/etc"), "model.name_or_path",
     "outside the allowed data roots"),
    ("model-explicit-local-missing", _good(model__name_or_path="./nope"), "model.name_or_path",
     "does not exist"),
    ("model-is-a-file", _good(model__name_or_path="train.csv"), "model.name_or_path",
     "not a directory"),
    ("model-without-config", _good(model__name_or_path="no-config-model"), "model.name_or_path",
     "has no config.json"),
]  # fmt: skip
