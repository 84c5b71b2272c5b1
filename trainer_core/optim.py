"""Optimizers and LR schedulers by their Hugging Face names.

``make_optimizer(module, cfg)`` is the ``make_optimizer`` callback ``build_engine`` calls with
the *wrapped* module (so FSDP/TP parameters are the sharded DTensors): two parameter groups,
weight decay on everything except biases and normalisation weights, which is the rule HF
``Trainer`` applies (``get_decay_parameter_names``: no decay for ``*bias`` and for parameters
of LayerNorm/RMSNorm-like modules). Frozen parameters (LoRA) are left out.

``make_scheduler(optimizer, cfg, total_steps)`` wraps ``transformers.get_scheduler``;
``warmup_ratio`` becomes ``ceil(ratio x total_steps)`` steps when ``warmup_steps`` is 0.
``reduce_lr_on_plateau`` is the one scheduler the loop steps with the eval loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from transformers import get_scheduler
from transformers.optimization import Adafactor

from trainer_core.config import TrainingConfig, higher_is_better

__all__ = ["Lion", "decay_groups", "make_optimizer", "make_scheduler", "warmup_steps"]


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


def make_optimizer(module: nn.Module, cfg: TrainingConfig) -> torch.optim.Optimizer:
    groups = decay_groups(module, cfg.weight_decay)
    betas = (cfg.adam_beta1, cfg.adam_beta2)
    lr = cfg.learning_rate
    if cfg.optim in ("adamw_torch", "adamw_torch_fused"):
        fused = cfg.optim == "adamw_torch_fused"
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=cfg.adam_epsilon, fused=fused)
    if cfg.optim == "adafactor":
        # HF Trainer's "adafactor" settings: an external LR schedule, no relative step.
        return Adafactor(  # type: ignore[no-untyped-call]
            groups, lr=lr, scale_parameter=False, relative_step=False
        )
    if cfg.optim == "sgd":
        return torch.optim.SGD(groups, lr=lr)
    return Lion(groups, lr=lr, betas=betas)


def warmup_steps(cfg: TrainingConfig, total_steps: int) -> int:
    if cfg.warmup_steps > 0:
        return cfg.warmup_steps
    return math.ceil(cfg.warmup_ratio * total_steps)


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainingConfig, total_steps: int) -> Any:
    if cfg.lr_scheduler_type == "reduce_lr_on_plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max" if higher_is_better(cfg) else "min"
        )
    return get_scheduler(
        cfg.lr_scheduler_type,
        optimizer,
        num_warmup_steps=warmup_steps(cfg, total_steps),
        num_training_steps=total_steps,
    )


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
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
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
