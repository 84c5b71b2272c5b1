"""Cross-field rules of a JobSpec: pure checks over an already schema-valid spec.

``cross_field_errors(spec)`` returns every violated rule (empty = fine) with the loc of the
field the user should change. Each check is a small function over the whole spec; the list
``_CHECKS`` is the table of rules. Rules that need the filesystem (paths, a local model's
``config.json``) live in ``service.jobs.paths``.

Decisions written down here:

- Length: ``max_steps > 0`` overrides ``num_train_epochs`` (as in Hugging Face); with
  ``max_steps == -1`` the epochs drive it and must be > 0; ``max_steps == 0`` is rejected.
- ``eval_strategy: steps`` without ``eval_steps`` evaluates every ``logging_steps`` (as
  Hugging Face does); ``effective_eval_steps`` is the one place that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from shunter.jobspec.deepspeed import deepspeed_config_problems
from shunter.jobspec.elastic import attempt_errors, elastic_errors
from shunter.jobspec.errors import FieldError
from shunter.jobspec.optim_rules import optimizer_errors
from shunter.jobspec.safety import safety_errors
from shunter.jobspec.spec import JobSpec
from shunter.jobspec.topology import topology_errors

__all__ = [
    "CLASSIFICATION_TASKS",
    "LABELLED_TASKS",
    "LM_TASKS",
    "best_metric_names",
    "cross_field_errors",
    "default_greater_is_better",
    "effective_eval_steps",
]

CLASSIFICATION_TASKS = frozenset({"sequence-classification", "token-classification"})
LM_TASKS = frozenset({"causal-lm", "masked-lm"})
# Tasks whose data has a label column (data.label_field), and those with num_labels >= 2.
LABELLED_TASKS = CLASSIFICATION_TASKS | {
    "regression",
    "multi-label-classification",
    "question-answering",
}
_MULTI_LABEL_TASKS = CLASSIFICATION_TASKS | {"multi-label-classification"}
# Metrics each task reports besides loss (trainer_core.tasks computes them).
_TASK_METRICS: dict[str, set[str]] = {
    "sequence-classification": {"accuracy"},
    "token-classification": {"accuracy"},
    "causal-lm": {"perplexity"},
    "masked-lm": {"perplexity"},
    "chat-sft": {"perplexity"},
    "seq2seq": {"rouge_l"},
    "regression": {"mse", "mae"},
    "multi-label-classification": {"micro_f1"},
    "question-answering": {"exact_match", "f1"},
}
_TP_STRATEGIES = frozenset({"tp", "fsdp+tp"})

_Check = Callable[[JobSpec], Iterator[FieldError]]


def cross_field_errors(spec: JobSpec) -> list[FieldError]:
    """Every cross-field rule the spec breaks, in a stable order; an elastic spec's are its
    own rules and these at each width (``shunter.jobspec.elastic``)."""
    if spec.resources.elastic:
        return list(elastic_errors(spec, _rigid_errors))
    return [*attempt_errors(spec), *_rigid_errors(spec)]


def _rigid_errors(spec: JobSpec) -> list[FieldError]:
    return [err for check in _CHECKS for err in check(spec)]


def effective_eval_steps(spec: JobSpec) -> int:
    """How often ``eval_strategy: steps`` evaluates: ``eval_steps``, else ``logging_steps``."""
    t = spec.training
    return t.eval_steps if t.eval_steps is not None else t.logging_steps


def best_metric_names(task: str) -> frozenset[str]:
    """Metric names trainer_core reports for a task (each also with an ``eval_`` prefix)."""
    base = {"loss"} | _TASK_METRICS[task]
    return frozenset(base | {f"eval_{m}" for m in base})


_LOWER_IS_BETTER = ("loss", "perplexity", "mse", "mae")  # errors: regression's mse and mae too


def default_greater_is_better(metric: str) -> bool:
    """Hugging Face's default (lower is better for losses), extended to every error metric we
    report: perplexity, and regression's mse and mae."""
    return not metric.endswith(_LOWER_IS_BETTER)


def _model_source(spec: JobSpec) -> Iterator[FieldError]:
    m = spec.model
    if m.name_or_path is None and not m.from_scratch:
        yield FieldError(
            "model.name_or_path",
            "required unless from_scratch is true and config_overrides.model_type is set",
        )
    if m.from_scratch and m.name_or_path is None:
        model_type = m.config_overrides.get("model_type")
        if not isinstance(model_type, str) or not model_type:
            yield FieldError(
                "model.config_overrides",
                "from_scratch without name_or_path needs config_overrides.model_type "
                "(e.g. llama, gpt2)",
            )
    if m.from_scratch and m.name_or_path is None and m.tokenizer is None:
        yield FieldError("model.tokenizer", "required when model.name_or_path is omitted")


def _task_fields(spec: JobSpec) -> Iterator[FieldError]:
    task, m, d = spec.model.task, spec.model, spec.data
    if task in _MULTI_LABEL_TASKS:
        if m.num_labels is None or m.num_labels < 2:
            yield FieldError("model.num_labels", f"{task} needs num_labels >= 2")
    elif task == "regression":
        if m.num_labels not in (None, 1):
            yield FieldError("model.num_labels", "regression predicts one value: 1 or null")
    elif m.num_labels is not None:
        yield FieldError("model.num_labels", f"only for classification tasks, not {task}")
    if task in LABELLED_TASKS and d.label_field is None:
        yield FieldError("data.label_field", f"{task} needs label_field (the label column)")
    if task not in LABELLED_TASKS and d.label_field is not None:
        yield FieldError(
            "data.label_field",
            f"only for classification tasks (and regression, question-answering), not {task}",
        )
    if task == "seq2seq" and d.target_field is None:
        yield FieldError("data.target_field", "seq2seq needs target_field (the target text)")
    if task != "seq2seq" and d.target_field is not None:
        yield FieldError("data.target_field", f"only for seq2seq, not {task}")
    if task == "question-answering" and d.text_pair_field is None:
        yield FieldError(
            "data.text_pair_field", "question-answering needs text_pair_field (the context)"
        )
    if d.text_pair_field is not None and task not in (
        "sequence-classification",
        "question-answering",
    ):
        yield FieldError(
            "data.text_pair_field",
            f"only for sequence-classification and question-answering, not {task}",
        )
    if d.packing and task not in ("causal-lm", "chat-sft"):
        yield FieldError("data.packing", f"packing is only for causal-lm and chat-sft, not {task}")
    yield from _loss_options(spec)


def _loss_options(spec: JobSpec) -> Iterator[FieldError]:
    task, t = spec.model.task, spec.training
    if t.class_weights is not None:
        if task not in CLASSIFICATION_TASKS:
            yield FieldError(
                "training.class_weights",
                f"only for sequence- and token-classification, not {task}",
            )
        elif len(t.class_weights) != spec.model.num_labels:
            yield FieldError(
                "training.class_weights",
                f"give one weight per label: {spec.model.num_labels} (model.num_labels), "
                f"not {len(t.class_weights)}",
            )
    if t.label_smoothing_factor > 0 and task in ("regression", "multi-label-classification"):
        yield FieldError(
            "training.label_smoothing_factor", f"only for cross-entropy tasks, not {task}"
        )


def _length(spec: JobSpec) -> Iterator[FieldError]:
    t = spec.training
    if t.max_steps == 0:
        yield FieldError(
            "training.max_steps", "0 trains nothing; use -1 (train by num_train_epochs) or > 0"
        )
    elif t.max_steps == -1 and t.num_train_epochs <= 0:
        yield FieldError(
            "training.num_train_epochs", "must be > 0 when max_steps is -1 (or set max_steps > 0)"
        )


def _precision(spec: JobSpec) -> Iterator[FieldError]:
    t, gpus = spec.training, spec.resources.gpus_per_worker
    if t.bf16 and t.fp16:
        yield FieldError("training.fp16", "bf16 and fp16 cannot both be true; pick one")
    elif t.fp16 and gpus == 0:
        yield FieldError(
            "training.fp16", "fp16 needs GPUs (resources.gpus_per_worker > 0); on CPU use bf16"
        )
    if spec.model.dtype == "float16" and gpus == 0:
        yield FieldError(
            "model.dtype", "float16 parameters need GPUs; on CPU use float32 or bfloat16"
        )


def _warmup(spec: JobSpec) -> Iterator[FieldError]:
    t = spec.training
    if t.warmup_steps > 0 and t.warmup_ratio > 0:
        yield FieldError("training.warmup_ratio", "set warmup_steps or warmup_ratio, not both")


def _evaluation(spec: JobSpec) -> Iterator[FieldError]:
    t = spec.training
    if t.eval_strategy != "no" and spec.data.eval is None:
        yield FieldError("data.eval", f"eval_strategy {t.eval_strategy!r} needs an eval dataset")
    if t.lr_scheduler_type == "reduce_lr_on_plateau" and t.eval_strategy == "no":
        yield FieldError(
            "training.lr_scheduler_type", "reduce_lr_on_plateau needs eval_strategy steps or epoch"
        )
    metric = t.metric_for_best_model
    if metric is not None and metric not in best_metric_names(spec.model.task):
        names = ", ".join(sorted(best_metric_names(spec.model.task)))
        yield FieldError(
            "training.metric_for_best_model",
            f"{metric!r} is not reported for {spec.model.task}; one of: {names}",
        )
    if t.early_stopping_patience is not None and not t.load_best_model_at_end:
        yield FieldError("training.early_stopping_patience", "needs load_best_model_at_end: true")
    if t.save_strategy == "best" and t.eval_strategy == "no":
        yield FieldError(
            "training.save_strategy", "best saves after evals: set eval_strategy steps or epoch"
        )


def _best_model(spec: JobSpec) -> Iterator[FieldError]:
    t = spec.training
    if not t.load_best_model_at_end:
        return
    if spec.data.eval is None:
        yield FieldError("data.eval", "load_best_model_at_end needs an eval dataset")
    if t.metric_for_best_model is None:
        yield FieldError(
            "training.metric_for_best_model", "load_best_model_at_end needs a metric (e.g. loss)"
        )
    if t.eval_strategy == "no":
        yield FieldError(
            "training.eval_strategy", "load_best_model_at_end needs eval_strategy steps or epoch"
        )
    elif t.save_strategy == "best":
        return  # every new best is saved when it is evaluated
    elif t.save_strategy != t.eval_strategy:
        yield FieldError(
            "training.save_strategy",
            f"load_best_model_at_end needs save_strategy == eval_strategy ({t.eval_strategy!r})",
        )
    elif t.eval_strategy == "steps" and t.save_steps % effective_eval_steps(spec) != 0:
        yield FieldError(
            "training.save_steps",
            f"load_best_model_at_end needs save_steps ({t.save_steps}) to be a multiple of "
            f"eval_steps ({effective_eval_steps(spec)})",
        )


def _parallelism(spec: JobSpec) -> Iterator[FieldError]:
    d, workers = spec.distributed, spec.resources.max_workers
    tp = d.tensor_parallel_size
    if d.strategy in _TP_STRATEGIES:
        if tp < 2:
            yield FieldError(
                "distributed.tensor_parallel_size", f"strategy {d.strategy!r} needs >= 2"
            )
        elif workers % tp != 0:
            yield FieldError(
                "distributed.tensor_parallel_size",
                f"must divide resources.num_workers ({workers}); {tp} does not",
            )
        elif d.strategy == "fsdp+tp" and workers < 2 * tp:
            yield FieldError(
                "resources.num_workers",
                f"fsdp+tp needs num_workers >= 2 x tensor_parallel_size ({2 * tp})",
            )
    elif tp != 1:
        yield FieldError(
            "distributed.tensor_parallel_size",
            f"must be 1 for strategy {d.strategy!r}; use strategy tp or fsdp+tp",
        )


def _deepspeed(spec: JobSpec) -> Iterator[FieldError]:
    ds = spec.distributed.deepspeed
    if spec.distributed.strategy != "deepspeed":
        return
    if ds.offload_param and ds.stage != 3:
        yield FieldError("distributed.deepspeed.offload_param", "needs stage 3")
    if ds.offload_optimizer and ds.stage == 0:
        yield FieldError("distributed.deepspeed.offload_optimizer", "needs stage 1, 2 or 3")
    yield from _deepspeed_config_agrees(spec)


_DS_CONFIG = "distributed.deepspeed.config"


def _deepspeed_config_agrees(spec: JobSpec) -> Iterator[FieldError]:
    # The trainer's own check (shunter.jobspec.deepspeed), run now: a pass-through config
    # that contradicts the spec would fail (batch sizes, optimizer) or silently win (stage,
    # precision) at run time. "auto" defers to the spec, as in Hugging Face's integration.
    for problem in deepspeed_config_problems(spec):
        message = problem.removeprefix(_DS_CONFIG + ".")
        if "but the spec implies" in message:
            message += "; remove it or use 'auto'"
        yield FieldError(_DS_CONFIG, message)


def _lora(spec: JobSpec) -> Iterator[FieldError]:
    if spec.model.lora is not None and spec.distributed.strategy in _TP_STRATEGIES:
        yield FieldError("model.lora", "LoRA with tensor parallelism is not supported")
    peft = spec.model.peft
    if peft is None:
        return
    if spec.model.lora is not None:
        yield FieldError("model.peft", "set model.lora or model.peft, not both")
    if spec.distributed.strategy in _TP_STRATEGIES:
        yield FieldError("model.peft", "PEFT adapters with tensor parallelism are not supported")
    if peft.adapter == "prefix_tuning":
        for name in ("target_modules", "feedforward_modules"):
            if getattr(peft, name) is not None:
                yield FieldError(f"model.peft.{name}", "only for adapter ia3; remove it")
        if peft.merge_on_save:
            yield FieldError(
                "model.peft.merge_on_save", "a prefix has no weights to merge into; set false"
            )
        if spec.distributed.strategy in ("fsdp", "fsdp+tp"):
            yield FieldError(
                "model.peft.adapter",
                "prefix_tuning does not run under FSDP (its prefix embedding is not sharded); "
                "use strategy ddp or deepspeed, or adapter ia3",
            )
        if spec.model.task not in ("causal-lm", "sequence-classification"):
            yield FieldError(
                "model.peft.adapter",
                "prefix_tuning is for causal-lm and sequence-classification; use ia3 or lora",
            )
    elif peft.num_virtual_tokens is not None:
        yield FieldError("model.peft.num_virtual_tokens", "only for adapter prefix_tuning")


_CHECKS: tuple[_Check, ...] = (
    _model_source,
    _task_fields,
    _length,
    _precision,
    _warmup,
    _evaluation,
    _best_model,
    _parallelism,
    _deepspeed,
    _lora,
    optimizer_errors,  # optimizers, LoRA+, QLoRA: shunter.jobspec.optim_rules
    topology_errors,  # layout rules: shunter.jobspec.topology
    safety_errors,  # a spec is data: shunter.jobspec.safety
)
