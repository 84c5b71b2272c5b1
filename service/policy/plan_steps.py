"""The plan pass's steps that read no pass state (``policy.planner``): the reservation's start
with evictable borrowers counted as gone (``reserve_for``), whether a job may borrow the
reserved capacity (``borrows``), node totals as empty nodes (``AsNodes``), and the note on a
waiting job of the jobs behind it that start instead (``note_skips``). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from service.policy.capacity import NodeFree, place_gang
from service.policy.plan_types import QueueDecision
from service.policy.preemption import PreemptRules
from service.policy.reservations import Holder, Reservation, free_at, reserve
from service.policy.snapshot import QueueEntry, Snapshot
from shunter.jobspec.vocab import priority_rank

__all__ = ["AsNodes", "borrows", "note_skips", "reserve_for"]


def reserve_for(
    entry: QueueEntry, snap: Snapshot, holders: Sequence[Holder], evict: set[str]
) -> Reservation:
    """The reservation's start: the earliest time ``entry`` fits once the running jobs it
    may not take back (``evict``) end at their expected ends; jobs already stopping count
    as gone. ``now`` when it fits once the evictable ones stop: the loop then stops them."""
    stopping = {a.entry.job_id for a in snap.active if a.preempting}
    if not (evict or stopping):
        return reserve(entry, now=snap.now, totals=snap.totals, holders=holders)
    firm = [
        Holder(entry=h.entry, end_at=snap.now) if h.entry.job_id in stopping else h
        for h in holders
        if h.entry.job_id not in evict
    ]
    if place_gang(entry, free_at(snap.totals, firm, snap.now)) is not None:
        return Reservation(entry=entry, start_at=snap.now, holders_ending=len(stopping))
    return reserve(entry, now=snap.now, totals=snap.totals, holders=firm)


def borrows(
    entry: QueueEntry, reservation: Reservation, *, now: datetime, rules: PreemptRules
) -> bool:
    """A preemptible job not of a higher class than the reservation holder may use its
    capacity until the reservation's start (then ``reclaim_victims`` stops it); not within
    ``min_runtime_s`` of that start, so nothing is started only to be stopped at once."""
    start = reservation.start_at
    return (
        rules.by_reservation
        and entry.preemptible
        and priority_rank(entry.priority) >= priority_rank(reservation.entry.priority)
        and (start is None or (start - now).total_seconds() >= rules.min_runtime_s)
    )


@dataclass(frozen=True, kw_only=True)
class AsNodes:
    """Node totals as the ``capacity.NodeCapacity`` shape (alive, free = total)."""

    node_id: str
    total_cpus: float
    total_gpus: float
    alive: bool = True
    accelerator: str = ""

    @property
    def free_cpus(self) -> float:
        return self.total_cpus

    @property
    def free_gpus(self) -> float:
        return self.total_gpus

    @staticmethod
    def of(nodes: Sequence[NodeFree]) -> list[AsNodes]:
        return [
            AsNodes(
                node_id=n.node_id, total_cpus=n.cpus, total_gpus=n.gpus, accelerator=n.accelerator
            )
            for n in nodes
        ]


def note_skips(decisions: list[QueueDecision]) -> list[QueueDecision]:
    """On each job waiting for resources, name the jobs behind it that start instead."""
    out = list(decisions)
    behind: list[str] = []  # ids of starting jobs after position i, nearest last
    names: tuple[str, ...] = ()  # ``behind`` in order, made again only when it grew
    for i in range(len(decisions) - 1, -1, -1):
        d = decisions[i]
        if d.start_now:
            behind.append(d.entry.job_id)
        elif behind and d.wait is not None and d.wait.for_resources:
            if len(names) != len(behind):
                names = tuple(reversed(behind))
            out[i] = replace(d, wait=replace(d.wait, skipped_for=names))
    return out
