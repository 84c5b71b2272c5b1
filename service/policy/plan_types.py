"""What a plan is made of (``policy.planner``): the policy's configuration (``PolicyConfig``),
each queued job's decision (``QueueDecision``) and why it waits (``Wait``, ``WaitKind``), the
plan (``Plan``), and a job's own end bound (``bound_end``). Pure values; ``planner``
re-exports them, so ``from service.policy.planner import Plan`` keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from service.policy.preemption import Preemption, PreemptRules
from service.policy.reservations import Reservation
from service.policy.snapshot import QueueEntry

__all__ = [
    "POLICIES",
    "Plan",
    "PolicyConfig",
    "QueueDecision",
    "Wait",
    "WaitKind",
    "bound_end",
    "fmt_time",
]

POLICIES = ("fair", "priority", "fifo")


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    use_priority: bool = True
    fair_share: bool = True
    reservations: bool = True
    preempt: PreemptRules = field(default_factory=PreemptRules)

    @classmethod
    def named(
        cls, name: str, *, grace_s: float = 600.0, min_runtime_s: float = 300.0
    ) -> PolicyConfig:
        """``fair`` (everything), ``priority`` (classes + priority preemption + reservations,
        no fair share) or ``fifo`` (submit order with backfill: the old queue, no priority)."""
        rules = PreemptRules(grace_s=grace_s, min_runtime_s=min_runtime_s)
        if name == "fair":
            return cls(preempt=rules)
        if name == "priority":
            return cls(fair_share=False, preempt=replace(rules, by_fair_share=False))
        if name == "fifo":
            off = replace(rules, by_priority=False, by_fair_share=False)
            return cls(use_priority=False, fair_share=False, reservations=False, preempt=off)
        raise ValueError(f"policy: unknown {name!r}; use one of {', '.join(POLICIES)}")


class WaitKind(StrEnum):
    NEVER_FITS = "never_fits"  # larger than the cluster even empty: blocks nobody
    QUOTA = "quota"  # over its team's quota: blocks nobody
    RESOURCES = "resources"  # does not fit now (the first such job may hold the reservation)
    BEHIND_RESERVATION = "behind_reservation"  # fits, but would delay the reservation holder


@dataclass(frozen=True, kw_only=True)
class Wait:
    """Why a queued job waits: a typed value; ``text()`` writes it for people."""

    kind: WaitKind
    entry: QueueEntry
    detail: str = ""  # NEVER_FITS, QUOTA: the sentence
    reserved: bool = False  # RESOURCES: this job holds the reservation
    reservation: Reservation | None = None  # RESOURCES reserved, BEHIND_RESERVATION
    skipped_for: tuple[str, ...] = ()  # starting jobs behind it, nearest first

    @property
    def for_resources(self) -> bool:
        """Waiting for capacity (charged in the order, may be skipped by a job behind)."""
        return self.kind in (WaitKind.RESOURCES, WaitKind.BEHIND_RESERVATION)

    def text(self) -> str:
        e = self.entry
        if self.kind in (WaitKind.NEVER_FITS, WaitKind.QUOTA):
            return self.detail
        r = self.reservation
        start = fmt_time(r.start_at) if r is not None else ""
        if self.kind == WaitKind.BEHIND_RESERVATION:
            assert r is not None
            out = (
                f"waiting for resources: would delay {r.entry.job_id}, which holds a "
                f"reservation from {start}"
            )
        else:
            out = (
                f"waiting for resources: needs {e.num_workers} x "
                f"({e.cpus_per_worker:g} CPU, {e.gpus_per_worker:g} GPU) at once"
            )
            if self.reserved:
                out += f"; reserved: expected to start {start}"
        if self.skipped_for:
            n = len(self.skipped_for)
            more = f" (+{n - 1} more)" if n > 1 else ""
            out += f"; skipped for now: {self.skipped_for[0]}{more}, behind it, fits and starts"
        return out


@dataclass(frozen=True, kw_only=True)
class QueueDecision:
    entry: QueueEntry
    position: int  # 1-based
    start_now: bool
    wait: Wait | None = None  # why it waits; None when start_now
    placement: list[str] = field(default_factory=list)  # node id per worker when start_now

    @property
    def reason(self) -> str | None:
        """Why it waits, for people; None when it starts."""
        return None if self.wait is None else self.wait.text()


@dataclass(frozen=True, kw_only=True)
class Plan:
    decisions: list[QueueDecision]  # the queued jobs considered, in policy order
    preemptions: list[Preemption] = field(default_factory=list)
    reservation: Reservation | None = None  # the first blocked job's (reclaim, preemption)
    # Every reservation, the first one first, then one per set of accelerator types no
    # earlier holder accepts (``policy.type_reservations``); on an untyped cluster, at most one.
    # With ``complete=False``, those of blocked jobs after the pass stopped are left out.
    reservations: list[Reservation] = field(default_factory=list)
    shares: dict[str, float] = field(default_factory=dict)  # dominant share held, after starts
    fair: dict[str, float] = field(default_factory=dict)  # each demanding team's fair share
    # Queued jobs not considered (past ``max_depth``, or after nothing more could start with
    # ``complete=False``): they keep their last position, reason and ETA, marked stale.
    deferred: int = 0
    # With ``order_depth``: the jobs after the last one decided, in the order the complete
    # pass would consider them (none of them could start; past ``max_depth``, approximately),
    # those that never fit left out: the ETA forward run reads this order.
    rest: list[QueueEntry] = field(default_factory=list)

    def in_order(self) -> list[QueueEntry]:
        """The queued jobs in policy order, decided then ``rest``, never-fits left out."""
        decided = [
            d.entry for d in self.decisions if d.wait is None or d.wait.kind != WaitKind.NEVER_FITS
        ]
        return decided + self.rest

    @property
    def starts(self) -> list[QueueDecision]:
        return [d for d in self.decisions if d.start_now]


def bound_end(entry: QueueEntry, start: datetime) -> datetime | None:
    """When a job started at ``start`` must end by its own bound (rest of max_runtime)."""
    if entry.max_runtime_s is None:
        return None
    return start + timedelta(seconds=max(entry.max_runtime_s - entry.run_s, 0.0))


def fmt_time(t: datetime | None) -> str:
    return (
        "not yet known (a running job has no step rate or max_runtime)"
        if t is None
        else (t.strftime("%Y-%m-%dT%H:%M:%SZ"))
    )
