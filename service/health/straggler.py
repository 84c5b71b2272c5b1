"""The straggler watch: a window of per-rank step times -> events, node flags and cordons.

A metrics batch (stored by ``service.jobs.attempts.add_metrics``, then passed here by
``service.health.watch``) that stores a window's points for the first time
(``rank/<r>/compute_s``, ``window/samples_per_s``, ...; ``trainer_core.step_timing``) and
with them completes the window (``window/ranks`` ranks have arrived: the sender may split a
window over two batches) has it judged here, in the batch's transaction; so a window is
judged once, and a retried batch judges nothing:

1. ``straggler_rule.stragglers`` (the job's ``health.straggler.factor``): one ``straggler``
   event per slow rank, naming the rank and its node (Ray node id and IP, as the worker
   reported them at start: ``rank_files``);
2. each straggler's node is flagged (``node_cordons``); at ``SHUNTER_STRAGGLER_CORDON_AFTER``
   flags it is cordoned for ``SHUNTER_STRAGGLER_CORDON_SECONDS`` (the scheduler then leaves
   it out of placement, ``cordoned_nodes``, and a new attempt's driver keeps its workers off
   it with a Ray label selector, ``worker.driver.avoid_nodes_selector``) and the event says so;
3. ``straggler_rule.throughput_drop`` over the job's earlier windows (one indexed query per
   metric, only for a window batch): a ``throughput_dropped`` event when a drop begins.

Both event names map to the ``job.straggler`` webhook (``service.webhooks.events``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.db.tables import Event, Job, MetricPoint, NodeCordon
from service.health.straggler_rule import (
    THROUGHPUT_METRICS,
    Straggler,
    complete,
    cordon_due,
    rank_times,
    stragglers,
    throughput_drop,
)
from service.launch import StackTarget
from service.settings import Settings, settings_group
from shunter.jobspec.spec import StragglerSpec
from shunter.jobspec.vocab import EventType

__all__ = [
    "CordonPolicy",
    "cordoned_nodes",
    "is_window_point",
    "judge_new_windows",
    "judge_window",
    "window_points",
]


@dataclass(frozen=True, kw_only=True)
class CordonPolicy:
    after: int = 0  # flags that cordon a node; 0 = never
    seconds: float = 3600.0

    @classmethod
    def from_settings(cls, settings: Settings) -> CordonPolicy:
        return settings_group(cls, settings, "straggler_cordon_")


def is_window_point(name: str) -> bool:
    return name.startswith("rank/") or name.startswith("window/")


def window_points(session: Session, *, job_id: str, attempt: int, step: int) -> dict[str, float]:
    """Every stored point of one window (one indexed read: (job, attempt, step) leads the
    unique index), whichever batches brought them."""
    rows = session.execute(
        select(MetricPoint.name, MetricPoint.value).where(
            MetricPoint.job_id == job_id,
            MetricPoint.attempt == attempt,
            MetricPoint.step == step,
        )
    ).all()
    return {name: value for name, value in rows if is_window_point(name)}


def judge_window(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    step: int,
    points: Mapping[str, float],
    spec: StragglerSpec,
    nodes: Callable[[], list[StackTarget]],
    cordon: CordonPolicy,
    now: datetime,
) -> list[Event]:
    """Judge one window (``points``: its metrics at ``step``); returns the events added."""
    events = []
    slow = stragglers(rank_times(points), factor=spec.factor)
    where = {t.rank: t for t in nodes()} if slow else {}
    for s in slow:
        node = where.get(s.rank)
        note = _flag(session, node, job_id=job_id, cordon=cordon, now=now) if node else ""
        message = straggler_message(s, node=node, step=step, factor=spec.factor) + note
        events.append(
            Event(job_id=job_id, type=EventType.STRAGGLER, message=message, attempt=attempt)
        )
    for metric in THROUGHPUT_METRICS:
        if metric not in points:
            continue
        earlier = _earlier(session, job_id=job_id, metric=metric, attempt=attempt, step=step)
        drop = throughput_drop(points[metric], earlier, metric=metric, drop=spec.throughput_drop)
        if drop is not None:
            unit = metric.removeprefix("window/").replace("_per_s", "/s")
            message = (
                f"throughput dropped at step {step}: {drop.value:.4g} {unit} over the window, "
                f"below {spec.throughput_drop:g} x the job's median window {drop.median:.4g}"
            )
            events.append(
                Event(
                    job_id=job_id,
                    type=EventType.THROUGHPUT_DROPPED,
                    message=message,
                    attempt=attempt,
                )
            )
    session.add_all(events)
    return events


def straggler_message(s: Straggler, *, node: StackTarget | None, step: int, factor: float) -> str:
    at = f"node {node.node_ip or '?'} ({node.node_id})" if node else "an unreported node"
    wait = f", wait {s.wait_s:.3g} s" if s.wait_s is not None else ""
    return (
        f"rank {s.rank} on {at} is a straggler in the window ending at step {step}: compute "
        f"{s.compute_s:.3g} s/step{wait}, {s.ratio:.2f}x the gang's median {s.median_s:.3g} s "
        f"(factor {factor:g})"
    )


def _earlier(session: Session, *, job_id: str, metric: str, attempt: int, step: int) -> list[float]:
    """The job's windows of ``metric`` before this one (every attempt), oldest first."""
    rows = session.execute(
        select(MetricPoint.attempt, MetricPoint.step, MetricPoint.value)
        .where(MetricPoint.job_id == job_id, MetricPoint.name == metric)
        .order_by(MetricPoint.id)
    ).all()
    return [v for a, s, v in rows if (a, s) != (attempt, step)]


def _flag(
    session: Session, node: StackTarget, *, job_id: str, cordon: CordonPolicy, now: datetime
) -> str:
    """Count a flag on the node (race-free: insert-if-absent, then one increment); cordon it
    when due. Returns a note for the event."""
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    session.execute(
        insert(NodeCordon)
        .values(node_id=node.node_id, node_ip=node.node_ip, flags=0, total_flags=0, reason="")
        .on_conflict_do_nothing(index_elements=["node_id"])
    )
    flags = session.execute(
        update(NodeCordon)
        .where(NodeCordon.node_id == node.node_id)
        .values(
            flags=NodeCordon.flags + 1,
            total_flags=NodeCordon.total_flags + 1,
            node_ip=node.node_ip,
            last_flagged_at=now,
            last_job_id=job_id,
        )
        .returning(NodeCordon.flags)
        .execution_options(synchronize_session=False)
    ).scalar_one()
    if not cordon_due(flags, after=cordon.after):
        return f"; node flagged {flags} time(s)"
    until = now + timedelta(seconds=cordon.seconds)
    session.execute(
        update(NodeCordon)
        .where(NodeCordon.node_id == node.node_id)
        .values(
            flags=0,
            cordoned_until=until,
            reason=f"{flags} straggler flags (last: job {job_id})",
        )
        .execution_options(synchronize_session=False)
    )
    return f"; node cordoned until {until.isoformat(timespec='seconds')} after {flags} flags"


def cordoned_nodes(session: Session, *, now: datetime) -> set[str]:
    """The node ids cordoned at ``now`` (an expired cordon is simply past)."""
    rows = session.execute(
        select(NodeCordon.node_id).where(NodeCordon.cordoned_until > now)
    ).scalars()
    return set(rows)


def judge_new_windows(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    new: Iterable[tuple[str, int]],
    nodes: Callable[[], list[StackTarget]],
    cordon: CordonPolicy,
    now: datetime,
) -> None:
    """Judge each window that the batch's ``new`` points (name, step) complete: new windows
    only, so a retried batch judges nothing twice; a window still missing ranks is judged by
    the later batch that brings them."""
    windows = sorted({step for name, step in new if is_window_point(name)})
    if not windows:
        return
    job = session.get(Job, job_id)
    assert job is not None
    health = (job.spec or {}).get("health") or {}
    spec = StragglerSpec.model_validate(health.get("straggler") or {})
    for step in windows:
        points = window_points(session, job_id=job_id, attempt=attempt, step=step)
        if complete(points):
            judge_window(
                session,
                job_id=job_id,
                attempt=attempt,
                step=step,
                points=points,
                spec=spec,
                nodes=nodes,
                cordon=cordon,
                now=now,
            )
