"""Optimizers and LR schedulers by their Hugging Face names.

``make_optimizer(module, cfg)`` is the ``make_optimizer`` callback ``build_engine`` calls with
the *wrapped* module (so FSDP/TP parameters are the sharded DTensors): two parameter groups,
weight decay on everything except biases and normalisation weights, which is the rule HF
``Trainer`` applies (``get_decay_parameter_names``: no decay for ``*bias`` and for parameters
of LayerNorm/RMSNorm-like modules). Frozen parameters (LoRA) are left out.

Memory-saving optimizers, by HF's names (issue #29; where each runs: ``docs/parallel.md``):
``adamw_8bit`` / ``paged_adamw_8bit`` are bitsandbytes' ``AdamW8bit`` / ``PagedAdamW8bit``
(its CPU backend runs the 8-bit one), ``adamw_torch_8bit`` / ``adamw_torch_4bit`` torchao's
``AdamW8bit`` / ``AdamW4bit``, ``galore_*`` ``trainer_core.galore.GaLore``: the weights of
the ``nn.Linear`` modules whose names contain one of ``optim_target_modules`` (HF's match;
``all-linear``: every linear but the output embedding) form a projected group with
``optim_args``' rank, update_proj_gap, scale and proj_type (HF's defaults 128, 200, 0.25,
std). ``loraplus_lr_ratio`` (LoRA+, as PEFT's ``create_loraplus_optimizer``): the
``lora_B`` matrices and the trainable 1-D parameters learn at ratio x learning_rate.

``make_scheduler(optimizer, cfg, total_steps)``: HF's schedules (``transformers.get_scheduler``
with its default arguments: the same ``LambdaLR`` over the same functions, so the learning
rates and the saved scheduler state are HF's; ``tests/trainer_core/test_optim.py`` compares
them step by step). Our own copy because ``transformers.optimization`` imports
``transformers.trainer_utils``, which imports PEFT and through it bitsandbytes, accelerate,
DeepSpeed and MLflow: seconds of start-up that a job using none of them paid (issue #33).
``warmup_ratio`` becomes ``ceil(ratio x total_steps)`` steps when ``warmup_steps`` is 0.
``reduce_lr_on_plateau`` is the one scheduler the loop steps with the eval loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import partial, wraps
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from trainer_core.config import TrainingConfig, higher_is_better
from trainer_core.galore import GaLore, Inner, closure_loss

__all__ = [
    "Lion",
    "decay_groups",
    "galore_groups",
    "loraplus_groups",
    "make_optimizer",
    "make_scheduler",
    "optimizer_state_bytes",
    "warmup_steps",
]


def decay_groups(module: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Trainable params split into a decayed group and a no-decay group (biases, norms)."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()  # tied weights appear under two names; an optimizer takes one
    for module_name, sub in module.named_modules():
        is_norm = "norm" in type(sub).__name__.lower()
        for name, param in sub.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            full = f"{module_name}.{name}" if module_name else name
            (no_decay if is_norm or full.endswith("bias") else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def galore_groups(module: nn.Module, cfg: TrainingConfig) -> list[dict[str, Any]]:
    """``decay_groups`` with the target linears' weights moved to a projected group."""
    targets = cfg.optim_target_modules
    output = getattr(module, "module", module)
    get_out = getattr(output, "get_output_embeddings", None)
    out_weight = get_out().weight if callable(get_out) and get_out() is not None else None
    chosen: list[torch.Tensor] = []
    for name, sub in module.named_modules():
        if not isinstance(sub, nn.Linear) or not sub.weight.requires_grad:
            continue
        if sub.weight is out_weight and targets == "all-linear":
            continue
        if targets == "all-linear" or any(t in name for t in targets or ()):
            chosen.append(sub.weight)
    if not chosen:
        raise ValueError(
            f"training.optim_target_modules {targets!r} matches no linear module of the model"
        )
    ids = {id(p) for p in chosen}
    groups = [
        {**g, "params": [p for p in g["params"] if id(p) not in ids]}
        for g in decay_groups(module, cfg.weight_decay)
    ]
    args = cfg.optim_args
    projected = {
        "params": chosen,
        "weight_decay": cfg.weight_decay,
        "rank": (args and args.rank) or 128,
        "update_proj_gap": (args and args.update_proj_gap) or 200,
        "scale": (args and args.scale) or 0.25,
        "proj_type": (args and args.proj_type) or "std",
    }
    return [g for g in groups if g["params"]] + [projected]


def loraplus_groups(module: nn.Module, cfg: TrainingConfig, ratio: float) -> list[dict[str, Any]]:
    """``decay_groups`` split again: ``lora_B`` and 1-D params at ``ratio`` x lr (PEFT's rule)."""
    fast = {
        id(p)
        for name, p in module.named_parameters()
        if p.requires_grad and ("lora_B" in name or p.ndim == 1)
    }
    out: list[dict[str, Any]] = []
    for g in decay_groups(module, cfg.weight_decay):
        for is_fast in (False, True):
            params = [p for p in g["params"] if (id(p) in fast) == is_fast]
            if params:
                lr = cfg.learning_rate * (ratio if is_fast else 1.0)
                out.append({**g, "params": params, "lr": lr})
    return out


def make_optimizer(module: nn.Module, cfg: TrainingConfig) -> torch.optim.Optimizer:
    groups = decay_groups(module, cfg.weight_decay)
    if cfg.loraplus_lr_ratio is not None:
        groups = loraplus_groups(module, cfg, cfg.loraplus_lr_ratio)
    betas = (cfg.adam_beta1, cfg.adam_beta2)
    lr = cfg.learning_rate
    eps = cfg.adam_epsilon
    if cfg.optim.startswith("galore_"):
        inner: Inner = {"galore_adamw": "adamw", "galore_adamw_8bit": "adamw_8bit"}.get(
            cfg.optim, "adafactor"
        )  # type: ignore[assignment]
        return GaLore(galore_groups(module, cfg), inner=inner, lr=lr, betas=betas, eps=eps)
    if cfg.optim in ("adamw_8bit", "paged_adamw_8bit"):
        from bitsandbytes.optim import AdamW8bit as Bnb8bit  # type: ignore[attr-defined]
        from bitsandbytes.optim import PagedAdamW8bit  # type: ignore[attr-defined]

        cls = Bnb8bit if cfg.optim == "adamw_8bit" else PagedAdamW8bit
        return cls(groups, lr=lr, betas=betas, eps=eps)
    if cfg.optim in ("adamw_torch_8bit", "adamw_torch_4bit"):
        from torchao.optim import AdamW4bit, AdamW8bit

        low = AdamW8bit if cfg.optim == "adamw_torch_8bit" else AdamW4bit
        return low(groups, lr=lr, betas=betas, eps=eps)  # type: ignore[no-any-return]
    if cfg.optim in ("adamw_torch", "adamw_torch_fused"):
        # torch's fused kernel refuses a mix of DTensor parameters and plain step tensors
        # (FSDP2, TP on CPU): there the same AdamW runs unfused, with the same numbers.
        fused = cfg.optim == "adamw_torch_fused" and not _has_dtensor(groups)
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=cfg.adam_epsilon, fused=fused)
    if cfg.optim == "adafactor":
        from transformers.optimization import Adafactor  # imports PEFT: only when used

        # HF Trainer's "adafactor" settings: an external LR schedule, no relative step.
        return Adafactor(  # type: ignore[no-untyped-call]
            groups, lr=lr, scale_parameter=False, relative_step=False
        )
    if cfg.optim == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    return Lion(groups, lr=lr, betas=betas)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (what the plan's optimizer part counts):
    a quantized tensor subclass (torchao) by its inner tensors; one shared tensor once."""
    seen: set[tuple[int, int]] = set()
    total = 0

    def add(t: torch.Tensor) -> None:
        nonlocal total
        flatten = getattr(type(t), "__tensor_flatten__", None)
        if flatten is not None and type(t) is not torch.Tensor:
            names, _ = t.__tensor_flatten__()  # type: ignore[attr-defined]
            for name in names:
                add(getattr(t, name))
            return
        key = (t.data_ptr(), t.numel())
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()

    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                add(value)
    return total


def warmup_steps(cfg: TrainingConfig, total_steps: int) -> int:
    if cfg.warmup_steps > 0:
        return cfg.warmup_steps
    return math.ceil(cfg.warmup_ratio * total_steps)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainingConfig, total_steps: int) -> Any:
    if cfg.lr_scheduler_type == "reduce_lr_on_plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max" if higher_is_better(cfg) else "min"
        )
    return lambda_schedule(
        cfg.lr_scheduler_type, optimizer, warmup=warmup_steps(cfg, total_steps), total=total_steps
    )


def lambda_schedule(
    name: str, optimizer: torch.optim.Optimizer, *, warmup: int, total: int
) -> LambdaLR:
    """``transformers.get_scheduler(name, optimizer, warmup, total)`` for HF's default arguments
    (cosine: half a cycle; cosine_with_restarts: one; polynomial: power 1 to lr_end 1e-7)."""
    if name == "constant":
        return LambdaLR(optimizer, _constant)  # a plain function, as HF's: not in state_dict
    fn: Callable[..., float]
    if name == "constant_with_warmup":
        return LambdaLR(optimizer, partial(_constant_with_warmup, num_warmup_steps=warmup))
    steps = {"num_warmup_steps": warmup, "num_training_steps": total}
    if name == "linear":
        fn = partial(_linear, **steps)
    elif name == "cosine":
        fn = partial(_cosine, **steps, num_cycles=0.5)
    elif name == "cosine_with_restarts":
        fn = partial(_cosine_restarts, **steps, num_cycles=1)
    elif name == "polynomial":
        lr_init, lr_end = optimizer.defaults["lr"], 1e-7
        if not lr_init > lr_end:
            raise ValueError(f"lr_end ({lr_end}) must be smaller than initial lr ({lr_init})")
        fn = partial(_polynomial, **steps, lr_end=lr_end, power=1.0, lr_init=lr_init)
    else:
        raise ValueError(f"unknown lr_scheduler_type {name!r}")
    return LambdaLR(optimizer, fn)


def _constant(_: int | None = None) -> float:
    return 1


def _with_warmup(decay: Callable[..., float]) -> Callable[..., float]:
    """The schedule that warms up linearly over ``num_warmup_steps``, then follows ``decay``
    (given the step and the same keywords)."""

    @wraps(decay)
    def schedule(step: int, *, num_warmup_steps: int, **kwargs: Any) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return decay(step, num_warmup_steps=num_warmup_steps, **kwargs)

    return schedule


@_with_warmup
def _constant_with_warmup(step: int, *, num_warmup_steps: int) -> float:
    return 1.0


@_with_warmup
def _linear(step: int, *, num_warmup_steps: int, num_training_steps: int) -> float:
    return max(
        0.0, float(num_training_steps - step) / float(max(1, num_training_steps - num_warmup_steps))
    )


def _progress(step: int, num_warmup_steps: int, num_training_steps: int) -> float:
    return float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))


@_with_warmup
def _cosine(
    step: int, *, num_warmup_steps: int, num_training_steps: int, num_cycles: float
) -> float:
    progress = _progress(step, num_warmup_steps, num_training_steps)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


@_with_warmup
def _cosine_restarts(
    step: int, *, num_warmup_steps: int, num_training_steps: int, num_cycles: int
) -> float:
    progress = _progress(step, num_warmup_steps, num_training_steps)
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


@_with_warmup
def _polynomial(
    step: int,
    *,
    num_warmup_steps: int,
    num_training_steps: int,
    lr_end: float,
    power: float,
    lr_init: float,
) -> float:
    if step > num_training_steps:
        return lr_end / lr_init  # LambdaLR multiplies by lr_init
    decay_steps = num_training_steps - num_warmup_steps
    pct_remaining = 1 - (step - num_warmup_steps) / decay_steps
    return float((lr_init - lr_end) * pct_remaining**power + lr_end) / lr_init


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").

    update = sign(β1·m + (1-β1)·g); p ← p·(1 - lr·wd) - lr·update; m ← β2·m + (1-β2)·g.
    Decoupled weight decay as in AdamW. Typical lr is 3-10x smaller than AdamW's.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"Lion lr must be > 0 (got {lr})")
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure_loss(closure)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return loss


def _has_dtensor(groups: Iterable[dict[str, Any]]) -> bool:
    """Whether any parameter in ``groups`` is a DTensor (sharded by FSDP2 or TP)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for g in groups for p in g["params"])
