"""Teams, quotas, budgets and tokens (``/v1/teams``, ``/v1/tokens``, ``/v1/whoami``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from service.schemas.base import Name, Utc, _In, _Out
from shunter.jobspec.vocab import Priority

__all__ = [
    "Budget",
    "BudgetRead",
    "Quota",
    "TeamCreate",
    "TeamPatch",
    "TeamRead",
    "TeamUsageRead",
    "TeamsPage",
    "TokenCreate",
    "TokenCreated",
    "TokenRead",
    "TokensPage",
    "WhoAmI",
]


class Quota(_In):
    max_gpus: float | None = Field(default=None, ge=0, le=1e6)
    max_cpus: float | None = Field(default=None, ge=0, le=1e7)
    max_running_jobs: int | None = Field(default=None, ge=0, le=1_000_000)
    # GPUs per accelerator type, {"h100": 8} (issue 30): a job that accepts several types
    # takes one its team has room on; a type not named is bounded by max_gpus only.
    max_gpus_by_type: dict[str, float] | None = Field(default=None, max_length=64)

    @field_validator("max_gpus_by_type")
    @classmethod
    def _types(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is None:
            return None
        out = {}
        for name, gpus in v.items():
            t = name.strip().removeprefix("accelerator_type:").lower()
            if not t or len(t) > 64 or not 0 <= gpus <= 1e6:
                raise ValueError(f"{name!r}: a type name and 0..1e6 GPUs")
            out[t] = float(gpus)
        return out


class Budget(_In):
    """A team's spending budget (``service.accounts.budgets``): GPU- and/or CPU-hours that its
    attempts may hold per ``period``, periods counted from ``starts`` (default: when set). Past
    it, ``hard``: new submits get 403; ``soft``: they queue at ``low`` priority."""

    gpu_hours: float | None = Field(default=None, ge=0, le=1e9)
    cpu_hours: float | None = Field(default=None, ge=0, le=1e10)
    period: Literal["week", "month"] = "month"
    starts: Utc | None = None
    mode: Literal["hard", "soft"] = "hard"

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if self.gpu_hours is None and self.cpu_hours is None:
            raise ValueError(
                "give gpu_hours or cpu_hours (or both); to remove a budget send budget: null"
            )
        return self


class BudgetRead(_Out):
    """A team's budget now: its limits and the current period's use (hours)."""

    gpu_hours: float | None
    cpu_hours: float | None
    period: str
    starts: Utc
    mode: str
    period_start: Utc  # the current period: [period_start, period_end)
    period_end: Utc
    gpu_hours_used: float
    cpu_hours_used: float
    gpu_hours_left: float | None  # None: that resource is not limited
    cpu_hours_left: float | None
    exceeded: bool


class TeamCreate(_In):
    name: Name
    quota: Quota | None = None
    weight: float = Field(default=1.0, gt=0, le=1000)
    max_priority: Priority = "normal"


class TeamPatch(_In):
    """Admin changes to a team; fields left out are unchanged. In ``quota``, a field given
    as null means unlimited; fields left out keep their value. Applies on the next tick."""

    weight: float | None = Field(default=None, gt=0, le=1000)
    quota: Quota | None = None
    max_priority: Priority | None = None
    budget: Budget | None = None  # given as null: the team has no budget any more


class TeamRead(_Out):
    name: str
    quota: Quota | None
    weight: float
    max_priority: str = "normal"
    created_at: Utc
    budget: BudgetRead | None = None


class TeamUsageRead(_Out):
    """Resource-seconds a team's attempts held between ``since`` and ``until``."""

    team: str
    since: Utc
    until: Utc
    gpu_seconds: float
    cpu_seconds: float
    attempts: int
    # The fair-share owed account now (``service.scheduler.owed``): share-seconds of the
    # cluster fair share still owes the team (negative: the team owes them). 3600 = the
    # whole cluster for an hour.
    owed_share_seconds: float = 0.0
    # The team's budget and the current period's use (None: no budget).
    budget: BudgetRead | None = None


class TeamsPage(_Out):
    data: list[TeamRead]


class TokenCreate(_In):
    team: Name
    role: Literal["admin", "member", "viewer"]
    name: str = Field(min_length=1, max_length=127)


class TokenRead(_Out):
    id: str
    team: str
    role: str
    name: str
    created_at: Utc
    revoked_at: Utc | None


class TokenCreated(_Out):
    id: str
    token: str  # shown once; only its hash is stored
    team: str
    role: str
    name: str


class TokensPage(_Out):
    data: list[TokenRead]


class WhoAmI(_Out):
    token_id: str
    team: str
    role: str
    name: str
