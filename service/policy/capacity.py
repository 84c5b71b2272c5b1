"""THE free capacity: what is free now, where a gang goes, and whether it could ever fit.

Pure (stdlib only): the scheduler loop, the ``/v1/queue`` view (through the positions and
reasons the loop stores) and admission's submit-time check all use these functions, so they
cannot disagree about whether a job fits.

- ``free_now(nodes, active)``: per alive node, the smaller of the launcher's free figure and
  the node's totals minus our own packing of the active jobs. Ray counts placement-group
  reservations as used, but a just-claimed job has no placement group yet (its driver is
  still starting): taking the minimum never double-books it.
- ``place_gang(gang, free)``: every worker of the gang on some node (first fit, fullest node
  first), or ``None``: all of a job's workers start at once or none do.
- Accelerator types (issue 30): a node carries one (``accelerator``, "" = untyped) and a
  gang may ask for some, in order of preference (``accelerators``; () = any). A gang that
  asks places all its workers on nodes of one type: the first type in its list it fits on
  (Kueue's flavor fungibility: the next type is tried before anyone is preempted). A gang
  that asks for none is placed as before, on any node.
- ``fits_ever(gang, nodes)``: the gang fits the alive nodes' totals (the cluster empty).
  For workers of one shape, first fit places the most workers possible, so this equals
  ``max_workers_placeable(...) >= num_workers``.
- ``pack(nodes, gangs)``: each gang placed in turn, as ``place_gang`` then ``take`` would;
  inside ``memo(PackMemo())`` a packing of the same inputs is computed once (the live loop
  packs its running jobs for the snapshot, the reservation, preemption and the ETAs).

Ray reports fractional resources as floats (0.1 + 0.2 noise): every comparison allows the one
``EPS``.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "EPS",
    "FreeBuckets",
    "FreeView",
    "Gang",
    "NodeCapacity",
    "NodeFree",
    "PackMemo",
    "Packing",
    "accelerators_of",
    "fits_ever",
    "free_now",
    "max_workers_placeable",
    "memo",
    "never_fits_reason",
    "pack",
    "place_gang",
    "take",
    "totals",
]

EPS = 1e-9


class Gang(Protocol):
    """A job's resource request: ``num_workers`` x (``cpus_per_worker``, ``gpus_per_worker``)."""

    @property
    def num_workers(self) -> int: ...
    @property
    def cpus_per_worker(self) -> float: ...
    @property
    def gpus_per_worker(self) -> float: ...


def accelerators_of(gang: Gang) -> tuple[str, ...]:
    """The types a gang accepts, in order of preference; () = any (``QueueEntry`` and the
    jobspec's resources carry them; other gangs accept any)."""
    return getattr(gang, "accelerators", ())


class NodeCapacity(Protocol):
    """One node as the launcher reports it (``service.launch.NodeResources`` is one)."""

    @property
    def node_id(self) -> str: ...
    @property
    def alive(self) -> bool: ...
    @property
    def total_cpus(self) -> float: ...
    @property
    def total_gpus(self) -> float: ...
    @property
    def free_cpus(self) -> float: ...
    @property
    def free_gpus(self) -> float: ...


@dataclass(frozen=True, kw_only=True)
class NodeFree:
    node_id: str
    cpus: float
    gpus: float
    accelerator: str = ""  # the node's accelerator type ("" = untyped)


class FreeView(Protocol):
    """What ``place_gang`` reads of a node: ``NodeFree``, or a caller's mutable node."""

    @property
    def node_id(self) -> str: ...
    @property
    def cpus(self) -> float: ...
    @property
    def gpus(self) -> float: ...
    @property
    def accelerator(self) -> str: ...


def _has(have: float, need: float) -> bool:
    return have + EPS >= need


def place_gang(gang: Gang, free: Sequence[FreeView]) -> list[str] | None:
    """A node id per worker (first fit, fullest node first), or None if any does not fit.
    A gang that asks for accelerator types: on the nodes of the first type it fits on."""
    acc = accelerators_of(gang)
    if acc:
        for t in acc:
            got = _place_gang(gang, [n for n in free if n.accelerator == t])
            if got is not None:
                return got
        return None
    return _place_gang(gang, free)


def _place_gang(gang: Gang, free: Sequence[FreeView]) -> list[str] | None:
    if gang.num_workers == 1:  # the fullest node that fits, first in list order: no sort
        c, g = gang.cpus_per_worker, gang.gpus_per_worker
        best: FreeView | None = None
        for n in free:
            fits = n.cpus + EPS >= c and n.gpus + EPS >= g
            if fits and (best is None or (n.gpus, n.cpus) < (best.gpus, best.cpus)):
                best = n
        return None if best is None else [best.node_id]
    left = {n.node_id: [n.cpus, n.gpus] for n in free}
    order = sorted(left, key=lambda nid: (left[nid][1], left[nid][0]))
    out: list[str] = []
    for _ in range(gang.num_workers):
        for nid in order:
            cpus, gpus = left[nid]
            if _has(cpus, gang.cpus_per_worker) and _has(gpus, gang.gpus_per_worker):
                left[nid] = [cpus - gang.cpus_per_worker, gpus - gang.gpus_per_worker]
                out.append(nid)
                break
        else:
            return None
    return out


def take(free: Sequence[NodeFree], placement: Sequence[str], gang: Gang) -> list[NodeFree]:
    """``free`` minus ``gang`` placed as ``placement``."""
    used = {nid: placement.count(nid) for nid in set(placement)}
    return [
        NodeFree(
            node_id=n.node_id,
            cpus=n.cpus - used[n.node_id] * gang.cpus_per_worker,
            gpus=n.gpus - used[n.node_id] * gang.gpus_per_worker,
            accelerator=n.accelerator,
        )
        if n.node_id in used
        else n  # untouched nodes are kept, not rebuilt
        for n in free
    ]


Packing = tuple[list[NodeFree], list[list[str] | None]]


class PackMemo:
    """``pack`` results kept by their inputs, for a caller that packs the same running jobs
    several times a tick and again the next tick while none starts or ends (the live loop:
    the snapshot's free capacity, the reservation, preemption, the ETA run). Opt-in, with
    ``memo(...)`` around the calls. Nodes are keyed by value (only ``NodeFree``, which is
    frozen); gangs by identity, so they must not change (``QueueEntry`` is frozen): the
    memo holds them, so no id is reused while its key is kept. A hit returns what ``pack``
    would (new outer lists; the nodes and placements inside are shared, read-only)."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[object, ...], tuple[Sequence[Gang], Packing]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def pack(self, nodes: Sequence[NodeFree], gangs: Sequence[Gang]) -> Packing:
        if not all(type(n) is NodeFree for n in nodes):
            return _pack(nodes, gangs)
        key = (
            tuple((n.node_id, n.cpus, n.gpus, n.accelerator) for n in nodes),
            tuple(map(id, gangs)),
        )
        with self._lock:
            got = self._kept.get(key)
            if got is not None:
                self._kept.move_to_end(key)
                self.hits += 1
        if got is None:
            got = (list(gangs), _pack(nodes, gangs))
            with self._lock:
                self.misses += 1
                self._kept[key] = got
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        free, placements = got[1]
        return list(free), list(placements)


_MEMO: ContextVar[PackMemo | None] = ContextVar("shunter_pack_memo", default=None)


@contextlib.contextmanager
def memo(m: PackMemo) -> Iterator[None]:
    """``pack`` calls in this block (this thread or task) go through ``m``."""
    token = _MEMO.set(m)
    try:
        yield
    finally:
        _MEMO.reset(token)


def pack(nodes: Sequence[NodeFree], gangs: Sequence[Gang]) -> Packing:
    """``place_gang`` then ``take`` for each gang in turn (None: it did not fit, skipped),
    exactly as that loop would place them, in O(distinct free levels) per gang rather than a
    sort of the nodes: nodes are kept in buckets by (free GPUs, free CPUs), ascending, each
    bucket in list order (``place_gang``'s stable sort). Returns what is left and the
    placements. Through the ``PackMemo`` of an enclosing ``memo`` block, if any."""
    m = _MEMO.get()
    return _pack(nodes, gangs) if m is None else m.pack(nodes, gangs)


def _pack(nodes: Sequence[NodeFree], gangs: Sequence[Gang]) -> Packing:
    free = FreeBuckets(nodes)
    out: list[list[str] | None] = []
    touched: set[int] = set()
    for g in gangs:
        chosen = free.place(g)
        if chosen is None:
            out.append(None)
            continue
        for i in dict.fromkeys(chosen):
            touched.add(i)
            used = chosen.count(i)
            free.set(
                i,
                cpus=free.cpus[i] - used * g.cpus_per_worker,
                gpus=free.gpus[i] - used * g.gpus_per_worker,
            )
        out.append([free.ids[i] for i in chosen])
    left = [  # untouched nodes are kept, not rebuilt
        NodeFree(
            node_id=free.ids[i], cpus=free.cpus[i], gpus=free.gpus[i], accelerator=free.accel[i]
        )
        if i in touched
        else n
        for i, n in enumerate(nodes)
    ]
    return left, out


class FreeBuckets:
    """Nodes' free capacity in buckets by (free GPUs, free CPUs), ascending, each bucket in
    list order (``place_gang``'s stable sort, kept instead of redone): ``place`` finds the
    nodes ``place_gang`` would choose over the same nodes in O(distinct free levels), and
    ``set`` moves one node. ``pack`` and the ETA forward run move their nodes through it."""

    def __init__(self, nodes: Sequence[FreeView]) -> None:
        self.ids = [n.node_id for n in nodes]
        self.cpus = [n.cpus for n in nodes]
        self.gpus = [n.gpus for n in nodes]
        self.accel = [n.accelerator for n in nodes]
        self._buckets: dict[tuple[float, float], list[int]] = {}
        for i in range(len(self.ids)):
            self._buckets.setdefault((self.gpus[i], self.cpus[i]), []).append(i)
        self._keys = sorted(self._buckets)

    def place(self, gang: Gang) -> list[int] | None:
        """The node (index) of each worker, as ``place_gang`` places them: the fullest node
        that fits first, as many workers on it as fit, then the next; None if any does not
        fit. A gang that asks for types: on the first type it fits on."""
        acc = accelerators_of(gang)
        if not acc:
            return self._place(gang, None)
        for t in acc:
            got = self._place(gang, t)
            if got is not None:
                return got
        return None

    def _place(self, gang: Gang, accel: str | None) -> list[int] | None:
        nc, ng, k = gang.cpus_per_worker, gang.gpus_per_worker, gang.num_workers
        chosen: list[int] = []
        for key in self._keys:
            if len(chosen) == k:
                break
            if not _has(key[0], ng):  # every node of the bucket lacks the GPUs
                continue
            for i in self._buckets[key]:
                if accel is not None and self.accel[i] != accel:
                    continue
                c, g = key[1], key[0]
                while len(chosen) < k and _has(c, nc) and _has(g, ng):
                    c, g = c - nc, g - ng
                    chosen.append(i)
                if len(chosen) == k:
                    break
        return chosen if len(chosen) == k else None

    def max_gpus(self) -> float:
        """The most GPUs free on one node (0 with no nodes)."""
        return self._keys[-1][0] if self._keys else 0.0

    def set(self, i: int, *, cpus: float, gpus: float) -> None:
        """Node ``i`` now has ``cpus`` and ``gpus`` free."""
        old = (self.gpus[i], self.cpus[i])
        bucket = self._buckets[old]
        bucket.remove(i)
        if not bucket:
            del self._buckets[old]
            self._keys.remove(old)
        self.cpus[i], self.gpus[i] = cpus, gpus
        new = (gpus, cpus)
        if new in self._buckets:
            bisect.insort(self._buckets[new], i)
        else:
            self._buckets[new] = [i]
            bisect.insort(self._keys, new)


def totals(nodes: Sequence[NodeCapacity]) -> list[NodeFree]:
    """The alive nodes as if empty."""
    return [
        NodeFree(
            node_id=n.node_id,
            cpus=n.total_cpus,
            gpus=n.total_gpus,
            accelerator=getattr(n, "accelerator", ""),
        )
        for n in nodes
        if n.alive
    ]


def free_now(nodes: Sequence[NodeCapacity], active: Sequence[Gang]) -> list[NodeFree]:
    """Per alive node: min(launcher's free, totals minus our packing of ``active``).

    ``active`` in a stable order (the loop sorts by job id). A job that no longer fits our
    packing (the cluster shrank) is skipped: the launcher's own figure covers it.
    """
    packed, _ = pack(totals(nodes), active)
    ours = {n.node_id: n for n in packed}
    return [
        NodeFree(
            node_id=n.node_id,
            cpus=min(n.free_cpus, ours[n.node_id].cpus),
            gpus=min(n.free_gpus, ours[n.node_id].gpus),
            accelerator=ours[n.node_id].accelerator,
        )
        for n in nodes
        if n.alive
    ]


def max_workers_placeable(gang: Gang, nodes: Sequence[NodeFree]) -> int:
    """How many workers of the gang's shape fit on ``nodes`` at most (a gang that asks for
    types: on the nodes of the type that holds the most)."""
    acc = accelerators_of(gang)
    if acc:
        return max(_max_workers(gang, [n for n in nodes if n.accelerator == t]) for t in acc)
    return _max_workers(gang, nodes)


def _max_workers(gang: Gang, nodes: Sequence[NodeFree]) -> int:
    total = 0
    for n in nodes:
        fit = math.floor(n.cpus / gang.cpus_per_worker + EPS) if gang.cpus_per_worker > 0 else None
        if gang.gpus_per_worker > 0:
            by_gpu = math.floor(n.gpus / gang.gpus_per_worker + EPS)
            fit = by_gpu if fit is None else min(fit, by_gpu)
        if fit is None:  # a worker that needs nothing fits any number of times
            return gang.num_workers
        total += max(fit, 0)
    return total


def fits_ever(gang: Gang, nodes: Sequence[NodeCapacity]) -> bool:
    """Could the gang start on these nodes if nothing else ran?"""
    return place_gang(gang, totals(nodes)) is not None


def never_fits_reason(gang: Gang, nodes: Sequence[NodeCapacity]) -> str | None:
    """Why the gang could not start even on the empty cluster, or None."""
    if fits_ever(gang, nodes):
        return None
    alive = totals(nodes)
    acc = accelerators_of(gang)
    of_type = ""
    if acc:
        alive = [n for n in alive if n.accelerator in acc]
        of_type = f" of type {' or '.join(acc)}"
    cpus = sum(n.cpus for n in alive)
    gpus = sum(n.gpus for n in alive)
    return (
        f"cannot fit the cluster as it is now: needs {gang.num_workers} x "
        f"({gang.cpus_per_worker:g} CPU, {gang.gpus_per_worker:g} GPU{of_type}) at once; the "
        f"cluster has {len(alive)} node(s){of_type} with {cpus:g} CPUs and {gpus:g} GPUs in all"
    )
