"""Per-rank step times (compute vs wait), gathered once per window, for the straggler watch.

Each rank times every optimizer step:

- ``compute``: its forward passes (CUDA events on a GPU, read at the window's end, after the
  logging step's own host sync; the host clock on a CPU). A forward has no gradient
  collective under DDP or ZeRO-1/2, so a slow device or a noisy neighbour shows on its own rank
  only (FSDP gathers shards in forward: its ranks partly wait there too).
- ``step``: the step's wall time on the host (``_train_step``; eval and checkpoints are not in
  it). ``wait = step - compute``: backward, where DDP overlaps the gradient all-reduce and a
  fast rank waits for the slowest one, and the optimizer step.

Every ``window`` steps (``health.straggler.window_steps`` rounded up to a multiple of
``training.logging_steps``), at a logging step, the per-rank sums reach every rank in ONE
``all_gather`` of 3 floats per rank on a gloo group (CPU tensors: no device sync, one
collective per window, none per step). The logged metrics then carry, per rank,
``rank/<r>/compute_s`` and ``rank/<r>/wait_s`` (means per step over the window), and the
gang's ``window/samples_per_s`` and ``window/tokens_per_s`` (from the logging intervals of the
window), and ``window/ranks`` (how many ranks reported: the service judges a window once all
of its points have arrived, whichever metrics batches carried them;
``service.health.straggler_rule``).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from shunter.jobspec.spec import StragglerSpec
from trainer_core.reporter import _control_group

__all__ = ["StepTimer", "rank_metric", "timed"]


def rank_metric(rank: int, kind: str) -> str:
    """The metric name of one rank's mean ``compute_s`` or ``wait_s`` over a window."""
    return f"rank/{rank}/{kind}"


@contextlib.contextmanager
def timed(add: Callable[[float], None]) -> Iterator[None]:
    """Times the block on the host clock and hands its seconds to ``add`` (also when the
    block raises)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        add(time.perf_counter() - t0)


class StepTimer:
    """See the module docstring. Every rank calls ``step``/``compute`` around the same work and
    ``window_end`` at the same logging steps (it may run a collective)."""

    def __init__(self, spec: StragglerSpec, *, logging_steps: int, device: torch.device) -> None:
        self.enabled = spec.enabled
        every = max(1, logging_steps)
        self.window = math.ceil(spec.window_steps / every) * every
        self._cuda = device.type == "cuda"
        self._reset()

    def _reset(self) -> None:
        self.steps = self._logged = 0
        self.step_s = 0.0
        self.compute_s = 0.0  # host-timed (CPU)
        self._events: list[tuple[Any, Any]] = []  # CUDA (start, end) pairs, read at the end
        self.samples = self.tokens = self.seconds = 0.0  # from the logging intervals

    def step(self) -> contextlib.AbstractContextManager[None]:
        return timed(self._stepped)

    def _stepped(self, seconds: float) -> None:
        self.steps += 1
        self.step_s += seconds

    def _computed(self, seconds: float) -> None:
        self.compute_s += seconds

    @contextlib.contextmanager
    def compute(self) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        if self._cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            try:
                yield
            finally:
                end.record()
                self._events.append((start, end))
            return
        with timed(self._computed):
            yield

    def window_end(self, logged: dict[str, float]) -> dict[str, float]:
        """Called at every logging step with that step's metrics (``samples_per_s``,
        ``tokens_per_s``, ``step_time_s`` over the steps since the last one). At a window's
        end: the per-rank times and the window's throughput (one collective); else ``{}``."""
        if not self.enabled:
            return {}
        seconds = float(logged.get("step_time_s", 0.0)) * (self.steps - self._logged)
        self._logged = self.steps
        self.seconds += seconds
        self.samples += float(logged.get("samples_per_s", 0.0)) * seconds
        self.tokens += float(logged.get("tokens_per_s", 0.0)) * seconds
        if self.steps < self.window:
            return {}
        compute = self.compute_s
        for start, end in self._events:
            end.synchronize()  # done already: the logging step synchronised the device
            compute += start.elapsed_time(end) / 1000.0
        mine = torch.tensor([float(self.steps), compute, self.step_s], dtype=torch.float64)
        rows = _gather(mine)
        out: dict[str, float] = {"window/ranks": float(len(rows))}  # the service's "complete"
        for rank, (steps_r, compute_r, step_r) in enumerate(rows):
            n = max(steps_r, 1.0)
            out[rank_metric(rank, "compute_s")] = compute_r / n
            out[rank_metric(rank, "wait_s")] = max(step_r - compute_r, 0.0) / n
        if self.seconds > 0:
            out["window/samples_per_s"] = self.samples / self.seconds
            out["window/tokens_per_s"] = self.tokens / self.seconds
        self._reset()
        return out


def _gather(mine: torch.Tensor) -> list[list[float]]:
    """Every rank's row, by world rank (a gloo all_gather; just ``mine`` when not distributed)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [mine.tolist()]
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, mine, group=_control_group())
    return [r.tolist() for r in rows]
