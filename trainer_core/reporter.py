"""How the loop hands metrics and checkpoints to whoever runs it.

``Reporter`` is the protocol (worker ships the Ray Train implementation); ``JsonlReporter``
is the torchrun one: rank 0 prints one JSON line per report and appends it to
``<output_dir>/metrics.jsonl``; other ranks stay silent. Every rank calls ``report`` the same
number of times (a Ray reporter may need a collective there).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Protocol, TextIO

import torch.distributed as dist

__all__ = ["JsonlReporter", "Reporter"]


class Reporter(Protocol):
    def report(
        self, step: int, metrics: dict[str, float], checkpoint_dir: Path | None = None
    ) -> None: ...

    def latest_checkpoint(self) -> Path | None:
        """A checkpoint directory to resume from, if the runner knows one; else ``None``."""
        ...


class JsonlReporter:
    """stdout + ``metrics.jsonl`` on rank 0. ``latest_checkpoint`` defers to the loop's scan."""

    def __init__(self, output_dir: Path | str, *, stream: TextIO | None = None) -> None:
        self.output_dir = Path(output_dir)
        self.stream = stream if stream is not None else sys.stdout
        self.records: list[dict[str, object]] = []  # rank 0's reports, for callers and tests

    def report(
        self, step: int, metrics: dict[str, float], checkpoint_dir: Path | None = None
    ) -> None:
        if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
            return
        record: dict[str, object] = {"step": step, "time": round(time.time(), 3), **metrics}
        if checkpoint_dir is not None:
            record["checkpoint"] = str(checkpoint_dir)
        self.records.append(record)
        line = json.dumps(record)
        print(line, file=self.stream, flush=True)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with open(self.output_dir / "metrics.jsonl", "a") as fh:
            fh.write(line + "\n")

    def latest_checkpoint(self) -> Path | None:
        return None  # the loop falls back to the newest verified checkpoint in output_dir
