"""The admin's bounds on a spec's ``health.hang`` (``SHUNTER_HEALTH_HANG_*``), checked at
submit (pass 2, ``service.jobs.hub``): a field outside them is a 422 naming the fix. The hang
watch itself lives in ``service.health``.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.settings import Settings, settings_group
from shunter.jobspec import JobSpec
from shunter.jobspec.errors import FieldError

__all__ = ["HangBounds", "bound_errors"]


@dataclass(frozen=True, kw_only=True)
class HangBounds:
    """The admin's bounds on ``health.hang`` (``SHUNTER_HEALTH_HANG_*``)."""

    factor_min: float = 3.0
    factor_max: float = 1000.0
    floor_min_s: float = 60.0
    floor_max_s: float = 86_400.0
    startup_min_s: float = 120.0
    startup_max_s: float = 86_400.0

    @classmethod
    def from_settings(cls, settings: Settings) -> HangBounds:
        return settings_group(cls, settings, "health_hang_")


def bound_errors(spec: JobSpec, bounds: HangBounds) -> list[FieldError]:
    """Every ``health.hang`` field outside this service's bounds, each naming the fix."""
    hang = spec.health.hang
    checks = (
        ("factor", hang.factor, bounds.factor_min, bounds.factor_max, "FACTOR", ""),
        ("floor_s", hang.floor_s, bounds.floor_min_s, bounds.floor_max_s, "FLOOR", " s"),
        ("startup_s", hang.startup_s, bounds.startup_min_s, bounds.startup_max_s, "STARTUP", " s"),
    )
    out = []
    for name, value, low, high, env, unit in checks:
        if low <= value <= high:
            continue
        side, limit, var = (
            ("below", low, f"{env}_MIN") if value < low else ("above", high, f"{env}_MAX")
        )
        out.append(
            FieldError(
                f"health.hang.{name}",
                f"{value:g}{unit} is {side} this service's limit {limit:g}{unit} "
                f"(SHUNTER_HEALTH_HANG_{var}{'_S' if unit else ''}); set it between "
                f"{low:g} and {high:g}",
            )
        )
    return out
