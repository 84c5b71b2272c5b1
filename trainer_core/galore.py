"""GaLore (Zhao et al. 2024, "Memory-Efficient LLM Training by Gradient Low-Rank Projection").

``GaLore`` is HF's ``galore_adamw`` / ``galore_adamw_8bit`` / ``galore_adafactor`` written as
one torch optimizer whose every state is a plain tensor, so ``torch.distributed.checkpoint``
saves and resumes it like AdamW's (the ``galore-torch`` package keeps a Python projector
object in the state, which a state dict cannot carry). The algorithm is galore-torch's:

- a parameter group with ``rank`` is projected: each 2-D gradient ``G`` (m x n) becomes
  ``G Q^T`` (m x r, ``Q = Vh[:r]`` of ``G``'s SVD: the "right" side) or ``P^T G`` (r x n,
  ``P = U[:, :r]``: "left"); ``proj_type`` std takes the right side when m >= n (the low-rank
  gradient keeps the longer side), reverse_std the other, right/left force one. The
  projector is recomputed from the current gradient every ``update_proj_gap`` steps (steps
  1, 1 + gap, ...), the moments carry over, as in galore-torch;
- the inner rule runs on the low-rank gradient: Adam (``adamw``), Adam with 8-bit blockwise
  states (``adamw_8bit``: bitsandbytes' dynamic maps, blocks of 256; tensors under 4096
  elements keep fp32 states, as bitsandbytes does) or Adafactor (``adafactor``: HF's
  factored second moment, no first moment, update clipping at RMS 1, HF Trainer's settings:
  external learning rate, no parameter scaling);
- the update is projected back, times ``scale``, and applied with decoupled weight decay
  (after the step, as galore-torch does). Adam's bias correction is galore-torch's (HF's
  former ``AdamW``): ``lr * sqrt(1 - b2^t) / (1 - b1^t)`` times ``m / (sqrt(v) + eps)``.
  Against galore-torch 1.0's ``GaLoreAdamW`` (same eps) on a tiny Llama, 12 steps, rank 16,
  gap 5, the losses were identical (max difference 0.0; measured while writing this,
  galore-torch is not a dependency).

Other parameters (norms, embeddings, groups without ``rank``) get the inner rule unprojected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch

from shunter.jobspec.optim_bytes import projected_shape

__all__ = ["BLOCK", "MIN_8BIT", "GaLore", "Inner", "closure_loss", "projected_shape"]

Inner = Literal["adamw", "adamw_8bit", "adafactor"]
BLOCK = 256  # 8-bit states: one fp32 absmax per block of this many elements
MIN_8BIT = 4096  # smaller states stay fp32 (bitsandbytes' min_8bit_size)


def closure_loss(closure: Callable[[], float] | None) -> float | None:
    """An optimizer ``step``'s loss: the closure's, run with grad enabled (None without one)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class GaLore(torch.optim.Optimizer):
    """Groups with ``rank`` (plus ``update_proj_gap``, ``scale``, ``proj_type``) are projected."""

    def __init__(
        self,
        params: Iterable[Any],
        *,
        inner: Inner,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if inner not in ("adamw", "adamw_8bit", "adafactor"):
            raise ValueError(f"unknown GaLore inner rule {inner!r}")
        self.inner = inner
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self._codes: dict[tuple[bool, torch.device], torch.Tensor] = {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As torch's, but states keep their saved dtypes: torch casts every floating state
        to its parameter's dtype, which would round a bf16 model's projector and absmax."""
        super().load_state_dict(state_dict)
        saved = [g["params"] for g in state_dict["param_groups"]]
        mine = [g["params"] for g in self.param_groups]
        for ids, params in zip(saved, mine, strict=True):
            for idx, p in zip(ids, params, strict=True):
                for key, value in state_dict["state"].get(idx, {}).items():
                    if isinstance(value, torch.Tensor):
                        self.state[p][key] = value.to(device=p.device, copy=True)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = closure_loss(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._step_param(p, group)
        return loss

    def _step_param(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.zeros((), dtype=torch.float32)
        state["step"] += 1
        step = int(state["step"].item())
        grad = p.grad.detach().float()  # type: ignore[union-attr]
        projected = "rank" in group and p.dim() == 2
        if projected:
            side, rank = projected_shape(tuple(p.shape), group["rank"], group["proj_type"])  # type: ignore[arg-type]
            if "ortho" not in state or (step - 1) % group["update_proj_gap"] == 0:
                state["ortho"] = _ortho(grad, rank, side)
            ortho = state["ortho"]
            grad = grad @ ortho.T if side == "right" else ortho.T @ grad
        lr, wd = group["lr"], group["weight_decay"]
        if self.inner == "adafactor":
            update, step_size = self._adafactor(state, grad, step), lr
        else:
            update = self._adam(state, grad, group)
            beta1, beta2 = group["betas"]
            # galore-torch's (HF's old AdamW) bias correction: eps added to sqrt(v) unscaled.
            step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
        if projected:
            update = (update @ ortho if side == "right" else ortho @ update) * group["scale"]
        p.add_(update.to(p.dtype), alpha=-step_size)
        if wd:
            p.add_(p, alpha=-lr * wd)

    def _adam(
        self, state: dict[str, Any], grad: torch.Tensor, group: dict[str, Any]
    ) -> torch.Tensor:
        beta1, beta2 = group["betas"]
        exp_avg = self._load(state, "exp_avg", grad, signed=True)
        exp_avg_sq = self._load(state, "exp_avg_sq", grad, signed=False)
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        self._store(state, "exp_avg", exp_avg, signed=True)
        self._store(state, "exp_avg_sq", exp_avg_sq, signed=False)
        denom = exp_avg_sq.sqrt().add_(group["eps"])
        update: torch.Tensor = exp_avg / denom
        return update

    def _adafactor(self, state: dict[str, Any], grad: torch.Tensor, step: int) -> torch.Tensor:
        beta2t = 1.0 - math.pow(step, -0.8)
        sq = grad.square() + 1e-30
        if grad.dim() >= 2:
            if "exp_avg_sq_row" not in state:
                state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1], device=grad.device)
                state["exp_avg_sq_col"] = torch.zeros(
                    grad.shape[:-2] + grad.shape[-1:], device=grad.device
                )
            row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
            row.mul_(beta2t).add_(sq.mean(dim=-1), alpha=1 - beta2t)
            col.mul_(beta2t).add_(sq.mean(dim=-2), alpha=1 - beta2t)
            r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
            update = r_factor * col.unsqueeze(-2).rsqrt() * grad
        else:
            if "exp_avg_sq" not in state:
                state["exp_avg_sq"] = torch.zeros_like(grad)
            v = state["exp_avg_sq"]
            v.mul_(beta2t).add_(sq, alpha=1 - beta2t)
            update = v.rsqrt() * grad
        rms = update.norm(2) / math.sqrt(update.numel())
        clipped: torch.Tensor = update.div_((rms / 1.0).clamp_(min=1.0))
        return clipped

    # 8-bit states: <name>_q (uint8, the state's shape) and <name>_absmax (fp32 per block).
    def _quantized(self, grad: torch.Tensor) -> bool:
        return self.inner == "adamw_8bit" and grad.numel() >= MIN_8BIT

    def _code(self, signed: bool, device: torch.device) -> torch.Tensor:
        """bitsandbytes' dynamic map, on the states' device (its CUDA kernels read it there)."""
        key = (signed, device)
        if key not in self._codes:
            from bitsandbytes.functional import create_dynamic_map

            code = create_dynamic_map(signed=signed)  # type: ignore[no-untyped-call]
            self._codes[key] = code.to(device)
        return self._codes[key]

    def _load(
        self, state: dict[str, Any], name: str, grad: torch.Tensor, *, signed: bool
    ) -> torch.Tensor:
        if not self._quantized(grad):
            if name not in state:
                state[name] = torch.zeros_like(grad)
            return state[name]  # type: ignore[no-any-return]
        if name + "_q" not in state:
            return torch.zeros_like(grad)
        from bitsandbytes.functional import dequantize_blockwise

        return dequantize_blockwise(
            state[name + "_q"],
            absmax=state[name + "_absmax"],
            code=self._code(signed, grad.device),
            blocksize=BLOCK,
        )

    def _store(
        self, state: dict[str, Any], name: str, value: torch.Tensor, *, signed: bool
    ) -> None:
        if not self._quantized(value):
            return  # updated in place
        from bitsandbytes.functional import quantize_blockwise

        q, quant = quantize_blockwise(value, code=self._code(signed, value.device), blocksize=BLOCK)
        state[name + "_q"], state[name + "_absmax"] = q, quant.absmax


def _ortho(grad: torch.Tensor, rank: int, side: str) -> torch.Tensor:
    u, _, vh = torch.linalg.svd(grad, full_matrices=False)
    ortho: torch.Tensor = vh[:rank] if side == "right" else u[:, :rank]
    return ortho.contiguous()
