"""``Meter``: the loop's device-side accumulators between logging steps (loss, grad norm,
samples, tokens); ``flush`` is the only host sync, once per logging step."""

from __future__ import annotations

import contextlib
import resource
import time

import torch

from trainer_core.engine import Engine
from trainer_core.step_timing import timed

__all__ = ["Meter", "peak_memory_mb"]


class Meter:
    """Device-side accumulators between logging steps; ``flush`` is the only sync point."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.loss = torch.zeros((), device=device)  # sum of per-step mean losses (local part)
        self.grad_norm = torch.zeros((), device=device)
        self.steps = self.samples = self.tokens = 0
        self.run_loss, self.run_steps, self.run_samples = 0.0, 0, 0
        self.t0 = time.perf_counter()

    def add(
        self, loss: torch.Tensor, grad_norm: torch.Tensor, *, samples: int, tokens: int
    ) -> None:
        self.loss += loss
        self.grad_norm = grad_norm
        self.steps, self.samples, self.tokens = (
            self.steps + 1,
            self.samples + samples,
            self.tokens + tokens,
        )

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """Time spent inside does not count as step time (eval between steps)."""
        return timed(self._paused)

    def _paused(self, seconds: float) -> None:
        self.t0 += seconds

    def flush(self, engine: Engine, *, lr: float, epoch: float) -> dict[str, float]:
        packed = torch.stack(
            [
                self.loss,
                torch.tensor(float(self.samples), device=self.device),
                torch.tensor(float(self.tokens), device=self.device),
            ]
        )
        # Each rank holds its share of every step's mean loss; the sum over ranks is the mean.
        loss, samples, tokens = engine.reduce_sum(packed).tolist()  # host sync (logging step)
        samples, tokens = samples / engine.cp_size, tokens / engine.cp_size  # cp: same rows
        grad_norm = float(self.grad_norm)  # host sync (logging step)
        now = time.perf_counter()
        elapsed = max(now - self.t0, 1e-9)
        out = {
            "loss": loss / self.steps,
            "learning_rate": lr,
            "grad_norm": grad_norm,
            "tokens_per_s": tokens / elapsed,
            "samples_per_s": samples / elapsed,
            "step_time_s": elapsed / self.steps,
            "epoch": epoch,
            "peak_memory_mb": peak_memory_mb(engine.device),
        }
        self.run_loss, self.run_steps = self.run_loss + loss, self.run_steps + self.steps
        self.run_samples += int(samples)
        self.loss = torch.zeros((), device=self.device)
        self.steps = self.samples = self.tokens = 0
        self.t0 = now
        return out


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB → MiB
