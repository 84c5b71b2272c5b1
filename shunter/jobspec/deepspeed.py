"""The DeepSpeed config dict: ours, the user's pass-through merged over it, ``"auto"`` filled.

Pure (stdlib only, no torch, no process group): the trainer builds its DeepSpeed config with
it, and submission (``rules.py``, pass 1) runs the same checks, so a config that the workers
would refuse is a 422 at submit. At submit some of the spec's values are known only at run
time (total steps of an epoch-based run, the model's hidden size): an ``"auto"`` for them is
left for the run, and a fixed value that the run would compare with them is refused.

1. Ours, from the parallel settings (trainer_core's ``ParallelConfig``) and ``TrainingValues``:
   batch sizes and accumulation (``train_batch_size = micro x accumulation x world``,
   DeepSpeed's own identity), clipping, ZeRO stage and offload, precision, and the switches
   that let a plain torch optimizer run.
2. The user's ``distributed.deepspeed.config`` is merged over it, key by key.
3. ``"auto"`` is replaced by the spec's value wherever Hugging Face's integration fills it
   (``HfTrainerDeepSpeedConfig.trainer_config_process`` and ``trainer_config_finalize``,
   transformers 5.23): batch sizes, accumulation, ``gradient_clipping``, the optimizer's
   ``lr/betas/eps/weight_decay``, the scheduler's ``warmup_min_lr/warmup_max_lr/
   warmup_num_steps/total_num_steps``, ``fp16/bf16.enabled`` and the hidden-size-based ZeRO
   buckets. A value that is not ``"auto"`` and contradicts the spec is an error listing every
   mismatch (as HF does), and so is an ``"auto"`` nothing can fill.

The ``optimizer`` and ``scheduler`` blocks describe what ``training.optim`` and
``training.lr_scheduler_type`` already build as torch objects (DeepSpeed's fused optimizers
JIT-compile C++ for minutes). So they are checked against the spec, type included, and then
dropped: the run uses the torch optimizer and the schedule the spec names, with the same values.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shunter.jobspec.spec import JobSpec

__all__ = [
    "DeepSpeedConfigError",
    "DeepSpeedInputs",
    "TrainingValues",
    "deepspeed_config",
    "deepspeed_config_problems",
]

_WHERE = "distributed.deepspeed.config"
# DeepSpeed optimizer type (lower case) -> the training.optim values it stands for.
_OPTIMIZERS = {
    "adamw": ("adamw_torch", "adamw_torch_fused"),
    "adam": ("adamw_torch", "adamw_torch_fused"),  # adam_w_mode defaults to true
    "lion": ("lion",),
}
# DeepSpeed scheduler type -> training.lr_scheduler_type (the same curve, linear warmup).
_SCHEDULERS = {
    "WarmupLR": "constant_with_warmup",
    "WarmupDecayLR": "linear",
    "WarmupCosineLR": "cosine",
}
_OPTIMIZER_PARAMS = frozenset({"lr", "betas", "eps", "weight_decay", "torch_adam", "adam_w_mode"})


class DeepSpeedConfigError(ValueError):
    """The pass-through config contradicts the spec or has an ``"auto"`` nobody fills."""


class _Parallel(Protocol):
    """The parallel settings read here (trainer_core's ``ParallelConfig`` has them)."""

    @property
    def micro_batch_size(self) -> int: ...
    @property
    def max_grad_norm(self) -> float | None: ...
    @property
    def deepspeed_stage(self) -> int: ...
    @property
    def offload_optimizer(self) -> bool: ...
    @property
    def offload_param(self) -> bool: ...
    @property
    def bf16(self) -> bool: ...
    @property
    def fp16(self) -> bool: ...
    @property
    def deepspeed_mixed_precision(self) -> str: ...
    @property
    def deepspeed_config(self) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True, kw_only=True)
class DeepSpeedInputs:
    """``_Parallel`` straight from a spec, for the check at submit."""

    micro_batch_size: int
    max_grad_norm: float | None
    deepspeed_stage: int
    offload_optimizer: bool
    offload_param: bool
    bf16: bool
    fp16: bool
    deepspeed_mixed_precision: str
    deepspeed_config: Mapping[str, Any] | None

    @classmethod
    def from_spec(cls, spec: JobSpec) -> DeepSpeedInputs:
        d, t = spec.distributed.deepspeed, spec.training
        return cls(
            micro_batch_size=t.per_device_train_batch_size,
            max_grad_norm=t.max_grad_norm or None,
            deepspeed_stage=d.stage,
            offload_optimizer=d.offload_optimizer,
            offload_param=d.offload_param,
            bf16=t.bf16,
            fp16=t.fp16,
            deepspeed_mixed_precision=d.mixed_precision,
            deepspeed_config=d.config,
        )


class _Training(Protocol):
    """The ``training`` fields read here (a JobSpec's ``TrainingSpec`` or trainer_core's
    config both have them)."""

    @property
    def gradient_accumulation_steps(self) -> int: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def adam_beta1(self) -> float: ...
    @property
    def adam_beta2(self) -> float: ...
    @property
    def adam_epsilon(self) -> float: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def optim(self) -> str: ...
    @property
    def lr_scheduler_type(self) -> str: ...
    @property
    def warmup_steps(self) -> int: ...
    @property
    def warmup_ratio(self) -> float: ...


@dataclass(frozen=True, kw_only=True)
class TrainingValues:
    """What ``"auto"`` stands for beyond ``ParallelConfig``; ``None`` = not known here (an
    ``"auto"`` that needs it is an error). ``total_steps`` is known when ``max_steps`` is set."""

    gradient_accumulation_steps: int = 1
    learning_rate: float | None = None
    betas: tuple[float, float] | None = None
    epsilon: float | None = None
    weight_decay: float | None = None
    optim: str | None = None
    lr_scheduler_type: str | None = None
    warmup_steps: int | None = None
    total_steps: int | None = None

    @classmethod
    def from_training(cls, t: _Training, *, total_steps: int | None) -> TrainingValues:
        warmup: int | None = t.warmup_steps
        if not t.warmup_steps:  # a ratio becomes steps only once the total is known
            warmup = None if total_steps is None else math.ceil(t.warmup_ratio * total_steps)
        return cls(
            gradient_accumulation_steps=t.gradient_accumulation_steps,
            learning_rate=t.learning_rate,
            betas=(t.adam_beta1, t.adam_beta2),
            epsilon=t.adam_epsilon,
            weight_decay=t.weight_decay,
            optim=t.optim,
            lr_scheduler_type=t.lr_scheduler_type,
            warmup_steps=warmup,
            total_steps=total_steps,
        )


def deepspeed_config(
    cfg: _Parallel,
    *,
    world_size: int,
    cuda: bool,
    training: TrainingValues | None = None,
    hidden_size: int | None = None,
) -> dict[str, Any]:
    """The config for ``deepspeed.initialize`` (see the module docstring for the layers)."""
    config, problems = _build(cfg, world_size, cuda, training or TrainingValues(), hidden_size)
    if problems:
        raise DeepSpeedConfigError(
            "DeepSpeed config disagrees with the spec:\n- "
            + "\n- ".join(problems)
            + "\nSet these values to 'auto' (filled from the spec) or remove them."
        )
    return config


def deepspeed_config_problems(spec: JobSpec) -> list[str]:
    """What ``deepspeed_config`` would refuse for this spec's run, found at submit. Total steps
    are known here only when ``max_steps`` is set, the hidden size not at all."""
    t = spec.training
    total = t.max_steps if t.max_steps > 0 else None
    _, problems = _build(
        DeepSpeedInputs.from_spec(spec),
        spec.resources.max_workers,
        False,
        TrainingValues.from_training(t, total_steps=total),
        None,
        at_submit=True,
    )
    return problems


# Keys whose value may be known only at run time (from the data size or the model).
_LATER = frozenset(
    {
        "scheduler.params.total_num_steps",
        "scheduler.params.warmup_num_steps",
        "zero_optimization.reduce_bucket_size",
        "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold",
    }
)


def _build(
    cfg: _Parallel,
    world_size: int,
    cuda: bool,
    t: TrainingValues,
    hidden_size: int | None,
    *,
    at_submit: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    accum = t.gradient_accumulation_steps
    # mixed_precision autocast: fp32 parameters, forward under torch.autocast (DeepSpeed's
    # torch_autocast section), in place of DeepSpeed's bf16 mode.
    autocast = cfg.bf16 and cfg.deepspeed_mixed_precision == "autocast"
    zero: dict[str, Any] = {"stage": cfg.deepspeed_stage}
    if cfg.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": cuda}
    if cfg.offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": cuda}
    ours: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": accum,
        "train_batch_size": cfg.micro_batch_size * accum * world_size,
        "gradient_clipping": cfg.max_grad_norm or 0.0,
        "zero_optimization": zero,
        "bf16": {"enabled": cfg.bf16 and not autocast},
        "fp16": {"enabled": cfg.fp16},
        # We pass a plain torch optimizer on purpose (no JIT-compiled ops).
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if autocast:
        ours["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    user = copy.deepcopy(dict(cfg.deepspeed_config or {}))
    problems: list[str] = []
    for dotted, value, must_match in _auto_values(ours, t, hidden_size, cfg.deepspeed_stage):
        later = at_submit and value is None and dotted in _LATER
        _fill(user, dotted, value, must_match=must_match, later=later, problems=problems)
    problems += _check_optimizer(user.pop("optimizer", None), t)
    problems += _check_scheduler(user.pop("scheduler", None), t)
    problems += [
        f"{_WHERE}.{k} is 'auto' but nothing fills it; give a value"
        for k in _autos(user)
        if not (at_submit and k in _LATER)
    ]
    return _merge(ours, user), problems


def _auto_values(
    ours: dict[str, Any], t: TrainingValues, hidden: int | None, stage: int
) -> list[tuple[str, Any, bool]]:
    """(dotted key, the spec's value or None if unknown, must a given value match it)."""
    values: list[tuple[str, Any, bool]] = [
        ("train_micro_batch_size_per_gpu", ours["train_micro_batch_size_per_gpu"], True),
        ("gradient_accumulation_steps", ours["gradient_accumulation_steps"], True),
        ("train_batch_size", ours["train_batch_size"], True),
        ("gradient_clipping", ours["gradient_clipping"], True),
        ("zero_optimization.stage", stage, True),
        ("fp16.enabled", ours["fp16"]["enabled"], True),
        ("bf16.enabled", ours["bf16"]["enabled"], True),
        ("optimizer.params.lr", t.learning_rate, True),
        ("optimizer.params.betas", None if t.betas is None else list(t.betas), True),
        ("optimizer.params.eps", t.epsilon, True),
        ("optimizer.params.weight_decay", t.weight_decay, True),
        ("scheduler.params.warmup_min_lr", 0, True),
        ("scheduler.params.warmup_max_lr", t.learning_rate, True),
        ("scheduler.params.total_num_steps", t.total_steps, True),
        (
            "scheduler.params.warmup_num_steps",
            None if t.warmup_steps is None else max(1, t.warmup_steps),
            True,
        ),
    ]
    h2 = None if hidden is None else hidden * hidden
    values += [
        ("zero_optimization.reduce_bucket_size", h2, False),
        (
            "zero_optimization.stage3_prefetch_bucket_size",
            None if h2 is None else int(0.9 * h2),
            False,
        ),
        (
            "zero_optimization.stage3_param_persistence_threshold",
            None if hidden is None else 10 * hidden,
            False,
        ),
    ]
    return values


def _fill(
    config: dict[str, Any],
    dotted: str,
    value: Any,
    *,
    must_match: bool,
    later: bool = False,
    problems: list[str],
) -> None:
    """Fill an ``"auto"`` at ``dotted`` with ``value``, or note a given value that contradicts
    it. ``later``: the value is known only at run time, so a fixed one cannot be checked now."""
    *parents, key = dotted.split(".")
    node: Any = config
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or key not in node:
        return
    given = node[key]
    if given == "auto":
        if value is not None:
            node[key] = value
        return
    if must_match and later:
        problems.append(
            f"{_WHERE}.{dotted} is {given!r} but the spec's value is known only at run time "
            "(it depends on the data size); use 'auto', or set training.max_steps"
        )
    elif must_match and value is not None and not _same(given, value):
        problems.append(f"{_WHERE}.{dotted} is {given!r} but the spec implies {value!r}")


def _same(given: Any, ours: Any) -> bool:
    # bool is an int in Python: `stage: true` is not stage 1, `enabled: 1` is not true.
    if isinstance(given, bool) != isinstance(ours, bool):
        return False
    if isinstance(given, list | tuple) and isinstance(ours, list | tuple):
        return len(given) == len(ours) and all(
            _same(a, b) for a, b in zip(given, ours, strict=True)
        )
    return bool(given == ours)


def _check_optimizer(block: Any, t: TrainingValues) -> list[str]:
    if block is None:
        return []
    if not isinstance(block, Mapping):
        return [f"{_WHERE}.optimizer must be an object {{type, params}}"]
    kind = str(block.get("type", "")).lower()
    problems: list[str] = []
    if t.optim is not None and t.optim not in _OPTIMIZERS.get(kind, ()):
        problems.append(
            f"{_WHERE}.optimizer.type {block.get('type')!r} is not training.optim "
            f"{t.optim!r}; the optimizer is training.optim (AdamW for adamw_torch, Lion for lion)"
        )
    params = block.get("params") or {}
    unknown = sorted(set(params) - _OPTIMIZER_PARAMS) if isinstance(params, Mapping) else []
    if unknown:
        problems.append(f"{_WHERE}.optimizer.params {unknown} have no training.* equivalent")
    if isinstance(params, Mapping) and params.get("adam_w_mode") is False:
        problems.append(f"{_WHERE}.optimizer.params.adam_w_mode false: training.optim is AdamW")
    return problems


def _check_scheduler(block: Any, t: TrainingValues) -> list[str]:
    if block is None:
        return []
    if not isinstance(block, Mapping):
        return [f"{_WHERE}.scheduler must be an object {{type, params}}"]
    kind = block.get("type")
    problems: list[str] = []
    if t.lr_scheduler_type is not None and _SCHEDULERS.get(str(kind)) != t.lr_scheduler_type:
        want = [k for k, v in _SCHEDULERS.items() if v == t.lr_scheduler_type]
        problems.append(
            f"{_WHERE}.scheduler.type {kind!r} is not training.lr_scheduler_type "
            f"{t.lr_scheduler_type!r}" + (f"; use {want[0]!r}" if want else "; remove the block")
        )
    params = block.get("params") or {}
    if isinstance(params, Mapping) and params.get("warmup_type", "linear") != "linear":
        problems.append(f"{_WHERE}.scheduler.params.warmup_type: the spec's warmup is linear")
    return problems


def _autos(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, Mapping):
        return [k for key, v in node.items() for k in _autos(v, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if node == "auto" else []


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
