"""The plain ETA forward run (``eta.estimate_starts``, and ``SimConfig(eta_legacy=True)``'s
baseline): the queue in plan order, each job at the earliest end at which it fits behind
the ones ahead, held to its bound; no backfill. Pure."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from service.policy.capacity import EPS, FreeBuckets, NodeFree, pack
from service.policy.planner import bound_end
from service.policy.snapshot import QueueEntry, Snapshot, TeamQuota, TeamUsage


def has_quotas(snap: Snapshot) -> bool:
    """Whether some team has a quota that usage is read against (else none is kept)."""
    return any(
        t.quota is not None
        and (
            t.quota.max_gpus is not None
            or t.quota.max_cpus is not None
            or t.quota.max_running_jobs is not None
        )
        for t in snap.teams.values()
    )


def charge(usage: dict[str, TeamUsage], e: QueueEntry, sign: int) -> None:
    """Add (1) or take back (-1) ``e``'s job, CPUs and GPUs to its team's usage."""
    u = usage.get(e.team, TeamUsage())
    usage[e.team] = TeamUsage(
        running_jobs=u.running_jobs + sign,
        cpus=u.cpus + sign * e.cpus,
        gpus=u.gpus + sign * e.gpus,
    )


def free_nodes(snap: Snapshot) -> tuple[list[NodeFree], list[list[str] | None]]:
    """The nodes' free capacity as a forward run starts from it (the free capacity, at most
    the totals less our packing of the running jobs), and that packing's placements."""
    packed, placements = snap.active_packing or pack(snap.totals, [a.entry for a in snap.active])
    ours = {n.node_id: n for n in packed}
    nodes = [
        NodeFree(
            node_id=n.node_id,
            cpus=min(n.cpus, ours[n.node_id].cpus) if n.node_id in ours else n.cpus,
            gpus=min(n.gpus, ours[n.node_id].gpus) if n.node_id in ours else n.gpus,
            accelerator=n.accelerator,
        )
        for n in snap.free
    ]
    return nodes, placements


def _virtual_end(entry: QueueEntry, start: datetime, default_s: float | None) -> datetime | None:
    end = bound_end(entry, start)
    if end is None and default_s is not None:
        end = start + timedelta(seconds=default_s)
    return end


class Forward:
    """The queue in the plan's order, each job started at the earliest expected end (of a
    running or virtually started job) at which it fits with the jobs ahead of it placed: the
    clock only moves forward, so no job is estimated ahead of one before it (the reservation
    holds back backfill that would delay it). Capacity: the node totals minus our packing of
    the running jobs (``capacity.free_now``'s), each end giving back its job's nodes. Cost:
    one gang placement (``FreeBuckets.place``) per queued job and per end passed."""

    def __init__(self, snap: Snapshot, default_runtime_s: float | None) -> None:
        self.snap, self.default_s = snap, default_runtime_s
        self.now = snap.now
        self.ends: list[tuple[datetime, int, list[str], QueueEntry]] = []  # a heap
        self.seq = itertools.count()
        self.usage: dict[str, TeamUsage] = {}
        # Usage is read only against quotas: not kept when no team has one.
        self.quotas = has_quotas(snap)
        nodes, placements = free_nodes(snap)
        # A job past its expected end is about to end: one second from now, not never.
        soon = snap.now + timedelta(seconds=1)
        for a, placement in zip(snap.active, placements, strict=True):
            self._charge(a.entry, 1)
            end = a.expected_end_at
            if placement is not None and end is not None:
                self._push(max(end, soon) if end <= snap.now else end, placement, a.entry)
        # The nodes as the run moves them, bucketed by free level (``capacity.FreeBuckets``:
        # a placement reads the levels, not every node).
        self.free = FreeBuckets(nodes)
        self.index = {nid: i for i, nid in enumerate(self.free.ids)}
        # Free capacity summed over the nodes: a gang needing more cannot be placed.
        self.free_cpus = sum(self.free.cpus)
        self.free_gpus = sum(self.free.gpus)

    def _push(self, end: datetime, placement: list[str], entry: QueueEntry) -> None:
        heapq.heappush(self.ends, (end, next(self.seq), placement, entry))

    def _give(self, placement: list[str], e: QueueEntry, sign: int) -> None:
        """Give back (1) or take (-1) ``e``'s workers on their nodes; touches only those."""
        free = self.free
        for nid in dict.fromkeys(placement):
            i, n = self.index[nid], placement.count(nid)
            free.set(
                i,
                cpus=free.cpus[i] + sign * n * e.cpus_per_worker,
                gpus=free.gpus[i] + sign * n * e.gpus_per_worker,
            )
        self.free_cpus += sign * len(placement) * e.cpus_per_worker
        self.free_gpus += sign * len(placement) * e.gpus_per_worker

    def _charge(self, e: QueueEntry, sign: int) -> None:
        if self.quotas:
            charge(self.usage, e, sign)

    def _release(self) -> bool:
        """Move the clock to the next end and give its capacity back; False: no end left."""
        if not self.ends:
            return False
        end, _, placement, entry = heapq.heappop(self.ends)
        self.now = max(self.now, end)
        self._give(placement, entry, 1)
        self._charge(entry, -1)
        return True

    def run(
        self, queue: Sequence[QueueEntry], *, want: Collection[str] | None
    ) -> dict[str, datetime]:
        """``queue``: in policy order, the jobs that never fit left out."""
        out: dict[str, datetime] = {}
        missing = set(want) if want is not None else None
        if missing is not None and not missing:
            return out
        teams = self.snap.teams
        for e in queue:
            quota = teams[e.team].quota if e.team in teams else None
            while True:
                over = self.quotas and over_quota(e, self.usage.get(e.team, TeamUsage()), quota)
                placement: list[str] | None = None
                slack = e.num_workers * EPS  # place_gang allows EPS per worker
                if (
                    not over
                    and self.free_cpus + slack >= e.cpus
                    and self.free_gpus + slack >= e.gpus
                ):
                    nodes = self.free.place(e)  # what ``place_gang`` would choose
                    placement = None if nodes is None else [self.free.ids[i] for i in nodes]
                if placement is not None or not self._release():
                    break
            if placement is None:
                break  # it holds nothing that ends: nothing behind it gets an estimate
            out[e.job_id] = self.now
            self._give(placement, e, -1)
            self._charge(e, 1)
            end = _virtual_end(e, self.now, self.default_s)
            if end is not None:
                self._push(end, placement, e)
            if missing is not None:
                missing.discard(e.job_id)
                if not missing:
                    break
        return out


def over_quota(e: QueueEntry, usage: TeamUsage, quota: TeamQuota | None) -> bool:
    if quota is None:
        return False
    return (
        (quota.max_running_jobs is not None and usage.running_jobs + 1 > quota.max_running_jobs)
        or (quota.max_gpus is not None and usage.gpus + e.gpus > quota.max_gpus)
        or (quota.max_cpus is not None and usage.cpus + e.cpus > quota.max_cpus)
    )
