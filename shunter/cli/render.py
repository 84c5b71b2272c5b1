"""Rich renderables for the ``shunter`` CLI: tables, job details, sparklines.

Pure functions from client models to Rich objects (or strings), so they can be tested
without a terminal and reused by ``shunter watch``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shunter.client.responses import Checkpoint, Cluster, Job, MetricPoint, QueueEntry
from shunter.jobspec.plan import Plan

__all__ = [
    "STATUS_STYLE",
    "age",
    "checkpoints_table",
    "fmt_value",
    "job_detail",
    "jobs_table",
    "metrics_table",
    "plan_table",
    "progress_text",
    "queue_table",
    "sparkline",
    "status_text",
]

STATUS_STYLE = {
    "queued": "yellow",
    "starting": "cyan",
    "running": "bold cyan",
    "cancelling": "magenta",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "dim",
    "paused": "blue",
    "pruned": "dim yellow",
}

_BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 60) -> str:
    """A one-line chart of ``values``, bucket-averaged down to at most ``width`` characters.

    The lowest value maps to ``▁`` and the highest to ``█``; a flat series is all ``▄``.
    Non-finite values are dropped.
    """
    vals = [float(v) for v in values if v is not None and v == v and abs(v) != float("inf")]
    if not vals or width <= 0:
        return ""
    if len(vals) > width:
        # Average equal-sized buckets so a long run still shows its shape, not its first part.
        n = len(vals)
        vals = [
            sum(vals[i * n // width : (i + 1) * n // width])
            / max(1, (i + 1) * n // width - i * n // width)
            for i in range(width)
        ]
    lo, hi = min(vals), max(vals)
    if hi - lo < 1e-12:
        return _BLOCKS[3] * len(vals)
    scale = (len(_BLOCKS) - 1) / (hi - lo)
    return "".join(_BLOCKS[round((v - lo) * scale)] for v in vals)


def age(t: datetime | None, now: datetime | None = None) -> str:
    """Compact age such as ``42s``, ``5m``, ``3h``, ``2d``."""
    if t is None:
        return "-"
    now = now or datetime.now(UTC)
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    s = max(0, int((now - t).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else str(v)


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def progress_text(job: Job) -> str:
    p = job.progress
    if p is None or (not p.step and not p.total_steps):
        return "-"
    if p.total_steps:
        return f"{p.step or 0}/{p.total_steps} ({100 * (p.fraction or 0):.0f}%)"
    return str(p.step)


def jobs_table(jobs: Iterable[Job]) -> Table:
    # Light borders: ids are long and an 80-column terminal must still show every column.
    table = Table(title="Jobs", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("ID", no_wrap=True)
    table.add_column("NAME", min_width=10, overflow="fold")
    table.add_column("TEAM", overflow="fold")
    table.add_column("STATUS", no_wrap=True)
    table.add_column("PROGRESS")
    table.add_column("AGE", no_wrap=True)
    for j in jobs:
        table.add_row(
            j.id, j.name, j.team or "-", status_text(j.status), progress_text(j), age(j.created_at)
        )
    return table


def eta_text(when: datetime | None) -> str:
    """An ETA as UTC time and how far away; "unknown" when the scheduler has none."""
    if when is None:
        return "unknown"
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    secs = (when - datetime.now(UTC)).total_seconds()
    rel = (
        "now"
        if secs < 60
        else f"in {secs / 60:.0f} min"
        if secs < 5400
        else f"in {secs / 3600:.1f} h"
    )
    return f"{when.strftime('%Y-%m-%d %H:%M')}Z ({rel})"


def queue_table(entries: Iterable[QueueEntry]) -> Table:
    table = Table(title="Queue", title_justify="left")
    for col in ("#", "ID", "NAME", "TEAM", "PRIORITY", "WAITING", "STARTS", "BY (P90)", "REASON"):
        table.add_column(col)
    for e in entries:
        table.add_row(
            fmt_value(e.position),
            e.id or "(another team)",
            e.name or "-",
            e.team or "-",
            e.priority or "-",
            age(e.created_at),
            eta_text(e.estimated_start_at) + (" (stale)" if e.estimate_stale else ""),
            eta_text(e.estimated_start_p90_at) if e.estimated_start_p90_at else "-",
            e.pending_reason or "-",
        )
    return table


def cluster_table(cluster: Cluster) -> Table | Group:
    """One row per Ray node (free/total CPUs and GPUs, its GPU type), then the cluster's
    totals; on a typed cluster a second table: capacity by GPU type."""
    table = Table(title="Ray cluster", title_justify="left", show_footer=True)
    table.add_column("NODE", footer="total")
    table.add_column("ADDRESS")
    table.add_column("ALIVE")
    table.add_column("TYPE")
    table.add_column("CPUS free/total", footer=f"{cluster.free_cpus:g}/{cluster.total_cpus:g}")
    table.add_column("GPUS free/total", footer=f"{cluster.free_gpus:g}/{cluster.total_gpus:g}")
    for n in cluster.nodes:
        table.add_row(
            n.node_id[:12] or "-",
            n.address or "-",
            "yes" if n.alive else "no",
            n.accelerator or "-",
            f"{n.free_cpus:g}/{n.total_cpus:g}",
            f"{n.free_gpus:g}/{n.total_gpus:g}",
        )
    if not any(t for t in cluster.by_type):
        return table
    types = Table(title="GPUs by type", title_justify="left")
    for col in ("TYPE", "NODES", "GPUS free/total", "MEMORY", "WEIGHT"):
        types.add_column(col)
    for name, t in cluster.by_type.items():
        types.add_row(
            name or "(untyped)",
            str(t.nodes),
            f"{t.free_gpus:g}/{t.total_gpus:g}",
            "-" if t.memory_gb is None else f"{t.memory_gb:g} GB",
            f"{t.weight:g}",
        )
    return Group(table, types)


def _bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}" if unit != "B" else f"{n} B"
        size /= 1024
    return f"{size:.1f} TiB"


def _count(n: int | None) -> str:
    if n is None:
        return "unknown"
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.2f}{unit} ({n:,})"
    return str(n)


def plan_table(plan: Plan) -> Table:
    """A dry run's plan: layout, batch sizes, steps, parameters and memory per device."""
    table = Table(title="Plan", title_justify="left", box=box.SIMPLE, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    mesh = " x ".join(f"{k}={'?' if v is None else v}" for k, v in plan.mesh.items())
    table.add_row("strategy", f"{plan.strategy}, world size {plan.world_size}, mesh {mesh}")
    table.add_row(
        "batch",
        f"{plan.per_device_batch_size} per device, {plan.global_batch_size} global "
        f"(x{plan.data_parallel_size} data-parallel), {plan.accumulated_batch_size} per "
        f"optimizer step (x{plan.gradient_accumulation_steps} accumulation)",
    )
    rows = "unknown" if plan.train_rows is None else f"{plan.train_rows:,}"
    per_epoch = "unknown" if plan.steps_per_epoch is None else f"{plan.steps_per_epoch:,}"
    total = "unknown" if plan.total_steps is None else f"{plan.total_steps:,}"
    approx = "" if plan.steps_exact else " (approximate)"
    table.add_row("steps", f"{per_epoch} per epoch, {total} total{approx}; train rows {rows}")
    table.add_row(
        "parameters",
        f"{_count(plan.param_count)}, trainable {_count(plan.trainable_param_count)}",
    )
    m = plan.memory
    table.add_row(
        "memory/device",
        f"{_bytes(m.total_bytes)} = params {_bytes(m.params_bytes)} + grads "
        f"{_bytes(m.grads_bytes)} + optimizer {_bytes(m.optimizer_bytes)}",
    )
    table.add_row("", f"[dim]{m.basis}[/]")
    fits = {True: "[green]yes[/]", False: "[red]no[/]", None: "unknown"}[plan.fits]
    gpu = "" if plan.gpu_memory_bytes is None else f" (GPU memory {_bytes(plan.gpu_memory_bytes)})"
    table.add_row("fits", fits + gpu)
    for note in plan.notes:
        table.add_row("note", note)
    return table


def metrics_table(points: Sequence[MetricPoint], *, by_attempt: bool = False) -> Table:
    """One row per step, one column per metric name (in first-seen order); ``by_attempt``:
    one row per (attempt, step), with an ATTEMPT column (every attempt's points)."""
    names: list[str] = []
    rows: dict[tuple[int, int], dict[str, float | None]] = {}
    for p in points:
        if p.name not in names:
            names.append(p.name)
        key = ((p.attempt or 0) if by_attempt else 0, p.step)
        rows.setdefault(key, {})[p.name] = p.value
    table = Table(title="Metrics", title_justify="left")
    if by_attempt:
        table.add_column("ATTEMPT", justify="right")
    table.add_column("STEP", justify="right")
    for n in names:
        table.add_column(n, justify="right")
    for attempt, step in sorted(rows):
        lead = [str(attempt), str(step)] if by_attempt else [str(step)]
        table.add_row(*lead, *(fmt_value(rows[attempt, step].get(n)) for n in names))
    return table


def checkpoints_table(ckpts: Iterable[Checkpoint]) -> Table:
    table = Table(title="Checkpoints", title_justify="left")
    for col in ("ID", "STEP", "VERIFIED", "BYTES", "CREATED", "URI"):
        table.add_column(col)
    for c in ckpts:  # the id is what `shunter download --checkpoint` takes
        table.add_row(
            str(c.id),
            str(c.step),
            "yes" if c.verified else "no",
            fmt_value(c.bytes),
            c.created_at.isoformat(timespec="seconds") if c.created_at else "-",
            c.uri,
        )
    return table


def job_detail(job: Job) -> RenderableType:
    """Key/value summary of one job, its error (if any) and latest metrics."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, Any]] = [
        ("id", job.id),
        ("name", job.name),
        ("team", job.team or "-"),
        ("status", status_text(job.status)),
        ("attempt", job.attempt),
        ("progress", progress_text(job)),
        ("created", job.created_at.isoformat(timespec="seconds") if job.created_at else "-"),
        ("started", job.started_at.isoformat(timespec="seconds") if job.started_at else "-"),
        ("finished", job.finished_at.isoformat(timespec="seconds") if job.finished_at else "-"),
    ]
    if job.status == "queued":
        rows.append(("queue position", fmt_value(job.queue_position)))
        rows.append(("waiting for", job.pending_reason or "-"))
        stale = " (stale: deeper than the scheduler's plan depth)" if job.estimate_stale else ""
        rows.append(("expected start", eta_text(job.estimated_start_at) + stale))
        if job.estimated_start_p90_at is not None:
            rows.append(("starts by (p90)", eta_text(job.estimated_start_p90_at)))
    elif job.estimated_end_at is not None and not job.terminal:
        rows.append(("expected end", eta_text(job.estimated_end_at)))
    if job.final_model_uri:
        rows.append(("final model", job.final_model_uri))
    for key, value in rows:
        grid.add_row(key, value if isinstance(value, Text) else str(value))
    parts: list[RenderableType] = [grid]
    metrics = dict(job.latest_metrics or {})
    step = metrics.pop("step", None)  # the API keeps the step of the latest points beside them
    if metrics:
        title = "Latest metrics" + (f" (step {step})" if step is not None else "")
        m = Table(title=title, title_justify="left")
        m.add_column("metric")
        m.add_column("value", justify="right")
        for k, v in sorted(metrics.items()):
            m.add_row(k, fmt_value(v.get("value") if isinstance(v, dict) else v))
        parts.append(m)
    if job.error:
        parts.append(Text(f"error ({job.error.type}): {job.error.message}", style="bold red"))
    return Group(*parts)
