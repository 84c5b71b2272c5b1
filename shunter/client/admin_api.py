"""The cluster, queue and admin endpoints of :class:`shunter.client.Client`: teams, tokens,
retention (gc) and straggler node cordons."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from shunter.client.responses import (
    Cluster,
    IssuedToken,
    NodeCordon,
    QueueEntry,
    Team,
    TeamUsage,
    TokenInfo,
    WhoAmI,
)
from shunter.client.transport import Transport

__all__ = ["AdminAPI"]


class AdminAPI(Transport):
    """``/v1/queue``, ``/v1/cluster``, ``/v1/whoami``, ``/v1/teams``, ``/v1/tokens``,
    ``/v1/admin/...``."""

    def queue(self) -> builtins.list[QueueEntry]:
        """Queued jobs in the order they will be considered, with position and reason."""
        return list(self._pages("/v1/queue", QueueEntry, {}))

    def cluster(self) -> Cluster:
        return Cluster.model_validate(self._json("GET", "/v1/cluster"))

    def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(self._json("GET", "/v1/whoami"))

    def healthz(self) -> bool:
        self._request("GET", "/healthz")
        return True

    def create_team(
        self, name: str, *, quota: Mapping[str, Any] | None = None, weight: float | None = None
    ) -> Team:
        body: dict[str, Any] = {"name": name}
        if quota is not None:
            body["quota"] = dict(quota)
        if weight is not None:
            body["weight"] = weight
        return Team.model_validate(self._json("POST", "/v1/teams", json=body))

    def teams(self) -> builtins.list[Team]:
        return list(self._pages("/v1/teams", Team, {}))

    def patch_team(
        self,
        name: str,
        *,
        weight: float | None = None,
        quota: Mapping[str, Any] | None = None,
        max_priority: str | None = None,
        budget: Mapping[str, Any] | None = None,
        clear_budget: bool = False,
    ) -> Team:
        """Change a team (admin). In ``quota``, a key given as None means unlimited.
        ``budget``: ``{gpu_hours?, cpu_hours?, period, starts?, mode}``; ``clear_budget``
        removes the team's budget."""
        body: dict[str, Any] = {}
        if budget is not None or clear_budget:
            body["budget"] = None if clear_budget else dict(budget or {})
        if weight is not None:
            body["weight"] = weight
        if quota is not None:
            body["quota"] = dict(quota)
        if max_priority is not None:
            body["max_priority"] = max_priority
        return Team.model_validate(self._json("PATCH", f"/v1/teams/{name}", json=body))

    def team_usage(self, name: str, *, since: str | None = None) -> TeamUsage:
        """GPU- and CPU-seconds the team's attempts held since ``since`` (ISO 8601)."""
        params = {"since": since} if since else None
        return TeamUsage.model_validate(self._json("GET", f"/v1/teams/{name}/usage", params=params))

    def create_token(self, *, team: str, role: str, name: str) -> IssuedToken:
        """Issue a token; its plaintext is in ``.token`` and is never shown again."""
        body = {"team": team, "role": role, "name": name}
        return IssuedToken.model_validate(self._json("POST", "/v1/tokens", json=body))

    def tokens(self) -> builtins.list[TokenInfo]:
        return list(self._pages("/v1/tokens", TokenInfo, {}))

    def revoke_token(self, token_id: str | int) -> None:
        self._request("DELETE", f"/v1/tokens/{token_id}")

    def gc(self, older_than: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Admin: delete finished jobs older than ``older_than`` (``30d``); ``dry_run`` lists."""
        body = {"older_than": older_than, "dry_run": dry_run}
        result: dict[str, Any] = self._json("POST", "/v1/admin/gc", json=body)
        return result

    def nodes(self) -> builtins.list[NodeCordon]:
        """Admin: nodes the straggler watch flagged, and their cordons."""
        rows = self._json("GET", "/v1/admin/nodes")
        return [NodeCordon.model_validate(r) for r in rows]

    def uncordon(self, node_id: str) -> None:
        """Admin: end a node's cordon now and clear its flags."""
        self._request("DELETE", f"/v1/admin/nodes/{node_id}/cordon")
