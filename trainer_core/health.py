"""The divergence guard: skip a bad optimizer step, roll back after too many, then give up.

Every step the loop hands the guard the step's global mean loss and the pre-clip gradient
norm, both 0-dim device tensors, between backward and the optimizer step
(``Engine.clip_and_step(..., skip=guard.gate)``). The guard

1. builds a bad-step flag on the device: the loss or the norm is not finite, or the loss is
   above ``mean + spike_zscore x std`` of the recent good steps (``spike_window``; the
   threshold is a Python float computed from earlier steps, so no sync is needed for it);
2. sums the flag over the data-parallel group (one tiny all-reduce), so every rank takes the
   same decision even if one rank alone saw an inf;
3. reads flag, loss and norm to the host in one transfer (the one sync per step the guard
   costs; the loop's own metrics stay on the device until a logging step);
4. answers "skip" or "step". A skipped step leaves parameters and optimizer state untouched
   (as DeepSpeed's fp16 loss scaler does on overflow).

``max_skips`` skipped steps within ``skip_window`` steps ask the loop to roll back
(``rollback_due``); after ``max_rollbacks`` rollbacks the next one raises ``Diverged``, which
the worker reports as ``error.type: diverged``.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from shunter.jobspec.spec import DivergenceSpec

__all__ = ["Diverged", "DivergenceGuard", "Verdict"]

# Below this many good steps there is no spike check (the z-score would be noise).
_MIN_HISTORY = 16
# The standard deviation is floored at this share of |mean|: a perfectly flat loss would
# otherwise flag the smallest wobble as a spike.
_REL_STD_FLOOR = 0.01


class Diverged(RuntimeError):
    """The job diverged: too many rollbacks. The worker turns it into ``error.type: diverged``."""

    def __init__(self, step: int, last_finite_loss: float | None, rollbacks: int) -> None:
        loss = "none" if last_finite_loss is None else f"{last_finite_loss:.6g}"
        super().__init__(
            f"training diverged at step {step} after {rollbacks} rollback(s); "
            f"last finite loss {loss}"
        )
        self.step, self.last_finite_loss, self.rollbacks = step, last_finite_loss, rollbacks

    def __reduce__(self) -> tuple[Any, tuple[int, float | None, int]]:
        # Ray pickles a worker's exception to the driver: rebuild it from its fields.
        return (Diverged, (self.step, self.last_finite_loss, self.rollbacks))


@dataclass(frozen=True, kw_only=True)
class Verdict:
    skip: bool
    reason: str | None  # "non-finite loss" | "non-finite grad norm" | "loss spike" | None
    loss: float
    grad_norm: float


class DivergenceGuard:
    """Host-side bookkeeping of the checks; see the module docstring for the per-step cost."""

    def __init__(self, spec: DivergenceSpec, reduce_sum: Any = None) -> None:
        self.spec = spec
        self._reduce = reduce_sum if reduce_sum is not None else (lambda t: t)
        self.history: deque[float] = deque(maxlen=spec.spike_window)
        self.skipped: deque[int] = deque()  # steps skipped inside the current skip_window
        self.last_finite_loss: float | None = None
        self.total_skips = 0
        self.last: Verdict | None = None

    @property
    def enabled(self) -> bool:
        return self.spec.enabled

    def threshold(self) -> float:
        """The loss above which a step is a spike (``inf``: no spike check yet / at all)."""
        if self.spec.spike_zscore == 0 or len(self.history) < min(
            _MIN_HISTORY, self.spec.spike_window
        ):
            return math.inf
        mean = statistics.fmean(self.history)
        std = max(statistics.pstdev(self.history), _REL_STD_FLOOR * abs(mean), 1e-12)
        return mean + self.spec.spike_zscore * std

    def check(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> Verdict:
        """Judge one step from its global mean loss and pre-clip grad norm (device tensors)."""
        loss, norm = loss.detach().float(), grad_norm.detach().float().to(loss.device)
        bad = (~torch.isfinite(loss)) | (~torch.isfinite(norm)) | (loss > self.threshold())
        agreed = self._reduce(bad.float())  # every data-parallel rank takes the same decision
        flag, loss_v, norm_v = torch.stack([agreed, loss, norm]).tolist()  # the one sync
        return self.judge(bool(flag > 0), loss_v, norm_v)

    def judge(self, flagged: bool, loss: float, grad_norm: float) -> Verdict:
        """The host side of ``check`` (also what the unit tests drive directly)."""
        reason = None
        if not math.isfinite(loss):
            reason = "non-finite loss"
        elif not math.isfinite(grad_norm):
            reason = "non-finite grad norm"
        elif loss > self.threshold():
            reason = "loss spike"
        elif flagged:
            reason = "another rank saw a non-finite value"
        if reason is None:
            self.history.append(loss)
            self.last_finite_loss = loss
        elif math.isfinite(loss):
            self.last_finite_loss = loss
        self.last = Verdict(skip=reason is not None, reason=reason, loss=loss, grad_norm=grad_norm)
        return self.last

    def gate(self, loss: torch.Tensor) -> Any:
        """The ``skip`` callback for ``Engine.clip_and_step``: norm -> True to skip the step."""
        return lambda grad_norm: self.check(loss, grad_norm).skip

    def record_skip(self, step: int) -> None:
        self.skipped.append(step)
        self.total_skips += 1

    def rollback_due(self, step: int) -> bool:
        while self.skipped and self.skipped[0] <= step - self.spec.skip_window:
            self.skipped.popleft()
        return len(self.skipped) >= self.spec.max_skips

    def after_rollback(self) -> None:
        """Forget the window that led to the rollback (its losses and its skips)."""
        self.history.clear()
        self.skipped.clear()
