"""EASY backfill: the first job in policy order that does not fit gets a reservation.

The reservation's start is the earliest time the job fits once running jobs end at their
expected ends (``ActiveJob.expected_end_at``: ETA from the step rate, bounded by
max_runtime). A job behind it may start now (backfill) only if it ends before that start by
its own bound (the rest of its max_runtime), or if the reserved job still fits at that start
with the backfilled job still running (it uses capacity the reservation does not need).
When some running job has no known end, the reservation has no start (``start_at`` None)
and backfill is not held back: idle capacity is lent.

Where a running job sits is not known to the policy (Ray places the workers), so capacity
at a future time is the node totals minus our own packing of the jobs still running then,
the packing ``capacity.free_now`` uses. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from service.policy.capacity import NodeFree, pack, place_gang, take
from service.policy.snapshot import QueueEntry

__all__ = ["Holder", "Reservation", "StartView", "free_at", "may_backfill", "reserve"]


class Holder(NamedTuple):
    """A job holding capacity until ``end_at`` (None = unknown). A named tuple: a plan builds
    one per running job."""

    entry: QueueEntry
    end_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class Reservation:
    entry: QueueEntry
    start_at: datetime | None  # None = cannot be bounded yet (a holder has no known end)
    holders_ending: int  # running jobs that end before it starts


def free_at(totals: Sequence[NodeFree], holders: Sequence[Holder], t: datetime) -> list[NodeFree]:
    """Capacity at time ``t``: totals minus the packing of holders still running then."""
    return pack(totals, [h.entry for h in holders if h.end_at is None or h.end_at > t])[0]


def reserve(
    entry: QueueEntry, *, now: datetime, totals: Sequence[NodeFree], holders: Sequence[Holder]
) -> Reservation:
    """The earliest holder end at which ``entry`` fits (never ``now``: it does not fit now)."""
    ends = sorted({h.end_at for h in holders if h.end_at is not None and h.end_at > now})
    for t in ends:
        if place_gang(entry, free_at(totals, holders, t)) is not None:
            ending = sum(1 for h in holders if h.end_at is not None and h.end_at <= t)
            return Reservation(entry=entry, start_at=t, holders_ending=ending)
    return Reservation(entry=entry, start_at=None, holders_ending=0)


def may_backfill(
    candidate: QueueEntry,
    *,
    end_at: datetime | None,
    reservation: Reservation,
    totals: Sequence[NodeFree],
    holders: Sequence[Holder],
) -> bool:
    """May ``candidate`` (which fits now, bound ``end_at``) start ahead of the reservation?"""
    start = reservation.start_at
    if start is None:
        return True
    if end_at is not None and end_at <= start:
        return True
    after = free_at(totals, [*holders, Holder(entry=candidate, end_at=end_at)], start)
    return place_gang(reservation.entry, after) is not None


class StartView:
    """Capacity at the reservation's start, kept across one plan pass: ``free_at(totals,
    holders, start)`` once, then each job started behind the reservation is packed onto it
    in turn, as ``free_at`` would pack it last. ``may_backfill`` against it costs one gang
    placement instead of re-packing every holder."""

    def __init__(self, reservation: Reservation, free: list[NodeFree] | None) -> None:
        self.reservation = reservation
        self.free = free  # None: the reservation has no start
        # Gang shape -> may it run past the start? (valid until ``add`` changes ``free``)
        self._ok: dict[tuple[int, float, float, tuple[str, ...]], bool] = {}

    @classmethod
    def of(
        cls, reservation: Reservation, totals: Sequence[NodeFree], holders: Sequence[Holder]
    ) -> StartView:
        start = reservation.start_at
        return cls(reservation, None if start is None else free_at(totals, holders, start))

    def _after(self, candidate: QueueEntry, end_at: datetime | None) -> list[NodeFree] | None:
        """Capacity at the start with ``candidate`` still running; None if it has ended."""
        start = self.reservation.start_at
        if self.free is None or start is None or (end_at is not None and end_at <= start):
            return None
        placement = place_gang(candidate, self.free)
        return self.free if placement is None else take(self.free, placement, candidate)

    def may_backfill(self, candidate: QueueEntry, end_at: datetime | None) -> bool:
        """``may_backfill`` over the holders packed so far."""
        start = self.reservation.start_at
        if self.free is None or start is None or (end_at is not None and end_at <= start):
            return True
        shape = (
            candidate.num_workers,
            candidate.cpus_per_worker,
            candidate.gpus_per_worker,
            candidate.accelerators,
        )
        if shape not in self._ok:
            after = self._after(candidate, end_at)
            self._ok[shape] = after is None or place_gang(self.reservation.entry, after) is not None
        return self._ok[shape]

    def add(self, started: QueueEntry, end_at: datetime | None) -> None:
        """``started`` holds capacity from now (packed last, as ``free_at`` packs it)."""
        after = self._after(started, end_at)
        if after is not None:
            self.free = after
            self._ok.clear()
