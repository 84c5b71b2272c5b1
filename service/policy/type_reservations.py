"""Per-type EASY reservations (issue 30): beside the pass's first reservation
(``planner._Pass.reservation``), a blocked job whose accepted accelerator types share none
with any job already holding a reservation gets its own, its start found by the typed
placement (so from its types' nodes only). A job behind it starts now only if that start is
not delayed (``StartView.may_backfill``): strict EASY, no borrowing, so no reclaim either.

A job that asks for no type accepts every node, so it shares a type with every reservation:
on an untyped cluster (every node "" and no job asking a type) no second reservation is ever
made and the pass decides exactly as with one. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from service.policy.plan_steps import reserve_for
from service.policy.reservations import Holder, Reservation, StartView
from service.policy.snapshot import QueueEntry, Snapshot

__all__ = ["TypeReservations", "accepted", "may_hold_beside"]


def accepted(entry: QueueEntry) -> frozenset[str] | None:
    """The types ``entry`` may be placed on; None: any node (it asks for none)."""
    return frozenset(entry.accelerators) if entry.accelerators else None


def may_hold_beside(entry: QueueEntry, holders: Iterable[QueueEntry]) -> bool:
    """The rule: does blocked ``entry`` get a reservation of its own beside those of
    ``holders`` (at least one)? It asks for types, and no holder accepts any of them. The
    plan pass (``TypeReservations.may_hold``) and the ETA forward run (``eta_backfill``)."""
    mine = accepted(entry)
    if mine is None:
        return False
    some = False
    for h in holders:
        some = True
        theirs = accepted(h)
        if theirs is None or theirs & mine:
            return False
    return some


class TypeReservations:
    """The reservations after the first, one per set of types no earlier holder shares,
    each with its capacity at its start (``StartView``), kept across one plan pass."""

    def __init__(self) -> None:
        self.views: list[StartView] = []

    @property
    def reservations(self) -> list[Reservation]:
        return [v.reservation for v in self.views]

    def may_hold(self, entry: QueueEntry, first: Reservation | None) -> bool:
        """Does blocked ``entry`` get a reservation of its own beside ``first``'s (and the
        others'): it asks for types, and no holder accepts any of them?"""
        if first is None:
            return False
        return may_hold_beside(entry, (r.entry for r in (first, *self.reservations)))

    def reserve(self, entry: QueueEntry, snap: Snapshot, holders: Sequence[Holder]) -> Reservation:
        """``entry``'s reservation: the earliest expected end at which it fits on its types
        (running jobs stopping count as gone; no borrower is taken back)."""
        r = reserve_for(entry, snap, holders, set())
        self.views.append(StartView.of(r, snap.totals, holders))
        return r

    def refusing(self, candidate: QueueEntry, end_at: datetime | None) -> StartView | None:
        """The first reservation that ``candidate`` (which fits now, bound ``end_at``) would
        delay; None: it delays none."""
        for v in self.views:
            if not v.may_backfill(candidate, end_at):
                return v
        return None

    def add(self, started: QueueEntry, end_at: datetime | None) -> None:
        """``started`` holds capacity from now, at every reservation's start too."""
        for v in self.views:
            v.add(started, end_at)
