"""The launcher's cluster as last read, with its age: what admission checks against.

Reading the cluster from Ray is two HTTP calls to its dashboard. The scheduler reads it once
per tick (``refresh``); a submit reads what that tick saw (``seen``) instead of calling Ray
itself, so a submit never waits on Ray and never fails because its dashboard is down. A
process whose scheduler does not tick (``run_scheduler`` off) refreshes when the view is
older than ``max_age_s``: at most one read per window, a failed one included, whatever the
submit rate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from service.launch import ClusterResources, Launcher
from service.policy.accelerators import node_type
from service.policy.planner import QueueDecision
from service.policy.snapshot import Snapshot

__all__ = [
    "ClusterSeen",
    "ClusterView",
    "placed_type",
    "type_nodes",
    "with_node_types",
    "without_cordoned",
]


@dataclass(frozen=True, kw_only=True)
class ClusterSeen:
    cluster: ClusterResources | None  # None: never read successfully
    age_s: float | None  # seconds since ``cluster`` was read
    error: str | None  # the last read's failure, if it failed


class ClusterView:
    """Thread-safe: the scheduler's thread writes, request threads read."""

    def __init__(
        self,
        launcher: Launcher,
        *,
        max_age_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        node_types: Mapping[str, str] | None = None,
    ) -> None:
        self._launcher = launcher
        self._node_types = dict(node_types or {})  # SHUNTER_NODE_GROUP_ACCELERATORS
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cluster: ClusterResources | None = None
        self._read_at: float | None = None  # when _cluster was read
        self._tried_at: float | None = None  # the last read, successful or not
        self._error: str | None = None

    def refresh(self) -> ClusterResources:
        """Read the cluster from the launcher now and keep it; raises what the launcher raises
        (the failure is kept too, for ``seen``)."""
        now = self._clock()
        try:
            cluster = with_node_types(self._launcher.cluster(), self._node_types)
        except Exception as e:
            with self._lock:
                self._tried_at, self._error = now, f"{type(e).__name__}: {e}"[:300]
            raise
        with self._lock:
            self._cluster, self._read_at, self._tried_at, self._error = cluster, now, now, None
        return cluster

    def seen(self, *, refresh_if_stale: bool = True) -> ClusterSeen:
        """The last cluster read and its age. ``refresh_if_stale``: read again first when the
        last try is older than ``max_age_s`` (never raises)."""
        if refresh_if_stale:
            with self._lock:
                tried = self._tried_at
            if tried is None or self._clock() - tried > self._max_age_s:
                with contextlib.suppress(Exception):  # kept in _error; admission goes on
                    self.refresh()
        with self._lock:
            age = None if self._read_at is None else self._clock() - self._read_at
            return ClusterSeen(cluster=self._cluster, age_s=age, error=self._error)


def with_node_types(cluster: ClusterResources, overrides: Mapping[str, str]) -> ClusterResources:
    """The cluster with the admin's accelerator type per node group, address or node id over
    what Ray says (``policy.accelerators.node_type``). Pure."""
    if not overrides:
        return cluster
    return ClusterResources(
        nodes=[
            dataclasses.replace(
                n,
                accelerator=node_type(
                    current=n.accelerator,
                    node_group=n.node_group,
                    address=n.address,
                    node_id=n.node_id,
                    overrides=overrides,
                ),
            )
            for n in cluster.nodes
        ]
    )


def without_cordoned(cluster: ClusterResources, cordoned: Collection[str]) -> ClusterResources:
    """The cluster as placement sees it: a cordoned node (``service.health.straggler``) counts as
    not alive, so no gang is planned onto it until its cordon expires. Pure."""
    if not cordoned:
        return cluster
    return ClusterResources(
        nodes=[
            dataclasses.replace(n, alive=False) if n.node_id in cordoned else n
            for n in cluster.nodes
        ]
    )


def placed_type(snap: Snapshot, d: QueueDecision) -> str:
    """The accelerator type of the node a starting job's first worker was placed on ("" =
    untyped). Pure."""
    if not d.placement:
        return ""
    return next((n.accelerator for n in snap.totals if n.node_id == d.placement[0]), "")


def type_nodes(snap: Snapshot, d: QueueDecision) -> tuple[str, ...]:
    """The nodes a starting job's workers may use: for a job that asks for accelerator types,
    every alive node of the type the plan placed it on (Ray then places the workers within
    that type); () otherwise (any node). Pure."""
    if not d.entry.accelerators or not d.placement:
        return ()
    kind = next((n.accelerator for n in snap.totals if n.node_id == d.placement[0]), "")
    return tuple(sorted(n.node_id for n in snap.totals if n.accelerator == kind)) if kind else ()
