"""``shunter watch``: a live terminal view of one job until it ends.

The view shows the status, a progress bar (step/total with ETA), the latest value of every
metric and a loss sparkline. Metric points come from the SSE stream
(``/v1/jobs/{id}/metrics/stream``) on a background thread, seeded from ``/metrics`` history;
the job itself (status, progress) is polled every ``poll`` seconds. If the stream cannot be
opened or breaks, the watcher falls back to re-reading ``/metrics`` on each poll, so the
view stays correct either way, only less immediate.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from shunter.cli.render import fmt_value, sparkline, status_text
from shunter.client.client import Client
from shunter.client.errors import ShunterError
from shunter.client.responses import Job, MetricPoint

__all__ = ["MetricStore", "Watcher"]


class MetricStore:
    """Thread-safe set of metric points keyed by (name, step); later writes win, except that
    a point from an older attempt never replaces a newer attempt's point of the same step (a
    step re-run after a resume shows once, as ``GET /metrics`` lists it, also when the stream
    delivers the old attempt's point late)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, dict[int, float | None]] = {}
        self._attempt: dict[tuple[str, int], int] = {}
        self.last_id: int | None = None  # newest point id seen: where a stream resumes

    def add(self, point: MetricPoint) -> None:
        with self._lock:
            if point.id is not None:
                self.last_id = max(self.last_id or 0, point.id)
            key, attempt = (point.name, point.step), point.attempt or 0
            if self._attempt.get(key, -1) > attempt:
                return
            self._attempt[key] = attempt
            self._by_name.setdefault(point.name, {})[point.step] = point.value

    def series(self, name: str) -> list[tuple[int, float]]:
        with self._lock:
            pts = self._by_name.get(name, {})
            return [(s, v) for s, v in sorted(pts.items()) if v is not None]

    def latest(self) -> dict[str, tuple[int, float | None]]:
        with self._lock:
            return {n: max(pts.items()) for n, pts in self._by_name.items() if pts}

    def max_step(self) -> int:
        with self._lock:
            return max((max(pts) for pts in self._by_name.values() if pts), default=0)


class Watcher:
    """Follows one job; :meth:`run` returns the final (terminal) job."""

    def __init__(self, client: Client, job_id: str, *, poll: float = 1.0) -> None:
        self.client = client
        self.job_id = job_id
        self.poll = poll
        self.store = MetricStore()
        self._stream_ok = True
        self._progress = Progress(
            TextColumn("[bold]steps"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        self._task = self._progress.add_task("steps", total=None)

    def _load_history(self) -> None:
        for p in self.client.metrics(self.job_id):
            self.store.add(p)

    def _stream(self) -> None:
        try:
            for ev in self.client.stream_metrics(self.job_id, after=self.store.last_id):
                if ev.point is not None:
                    self.store.add(ev.point)
                for raw in ev.data.get("points", []) if isinstance(ev.data, dict) else []:
                    self.store.add(MetricPoint.model_validate(raw))
        except Exception:  # any failure: fall back to polling (see module docstring)
            self._stream_ok = False

    def render(self, job: Job) -> RenderableType:
        head = Text.assemble(("job ", "bold"), job.id, "  ", job.name, "  ")
        head.append_text(status_text(job.status))
        if job.status == "queued" and job.pending_reason:
            head.append(f"  (#{fmt_value(job.queue_position)}: {job.pending_reason})")
        parts: list[RenderableType] = [head, self._progress]
        latest = self.store.latest()
        if latest:
            table = Table(show_header=True, box=None, padding=(0, 2))
            table.add_column("metric")
            table.add_column("step", justify="right")
            table.add_column("value", justify="right")
            for name in sorted(latest):
                step, value = latest[name]
                table.add_row(name, str(step), fmt_value(value))
            parts.append(table)
        loss = [v for _, v in self.store.series("loss")]
        if loss:
            parts.append(
                Text.assemble(
                    ("loss ", "bold"),
                    (sparkline(loss), "cyan"),
                    f"  first {loss[0]:.4g}  min {min(loss):.4g}  last {loss[-1]:.4g}",
                )
            )
        if job.error:
            parts.append(Text(f"error ({job.error.type}): {job.error.message}", style="bold red"))
        return Group(*parts)

    def _update_progress(self, job: Job) -> None:
        step = max((job.progress.step or 0) if job.progress else 0, self.store.max_step())
        total = job.progress.total_steps if job.progress else None
        self._progress.update(self._task, completed=step, total=total or None)

    def run(
        self, console: Console | None = None, *, on_tick: Callable[[Job], None] | None = None
    ) -> Job:
        """Show the live view until the job is terminal; return the final job."""
        console = console or Console()
        job = self.client.get(self.job_id)
        # History is a nicety here; the stream or the later polls fill the view.
        with contextlib.suppress(ShunterError):
            self._load_history()
        threading.Thread(target=self._stream, name=f"watch-{self.job_id}", daemon=True).start()
        with Live(self.render(job), console=console, refresh_per_second=4) as live:
            while True:
                self._update_progress(job)
                live.update(self.render(job))
                if on_tick is not None:
                    on_tick(job)
                if job.terminal:
                    break
                time.sleep(self.poll)
                job = self.client.get(self.job_id)
                if not self._stream_ok or job.terminal:
                    self._load_history()  # catch up on points the stream may not have sent
            live.update(self.render(job))
        return job
