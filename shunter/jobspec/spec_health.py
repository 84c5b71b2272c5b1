"""The JobSpec's ``health`` section (divergence guard, hang and straggler watches) and its
``notify`` webhooks."""

from __future__ import annotations

from pydantic import (
    Field,
    field_validator,
)

from shunter.jobspec.spec_fields import (
    StrictModel,
)
from shunter.jobspec.vocab import WebhookEventType

__all__ = ["DivergenceSpec", "HangSpec", "HealthSpec", "NotifySpec", "StragglerSpec"]


class DivergenceSpec(StrictModel):
    """Divergence guard of the training loop: skip bad steps, roll back, give up."""

    enabled: bool = Field(True, description="check every step's loss and gradient norm")
    spike_zscore: float = Field(
        6.0,
        ge=0,
        le=1000,
        description="skip a step whose loss is this many standard deviations above the mean of "
        "the recent window; 0 = only non-finite losses/gradient norms are skipped",
    )
    spike_window: int = Field(
        100, ge=8, le=100_000, description="recent good steps the z-score is taken over, 8..100,000"
    )
    max_skips: int = Field(
        5, ge=1, le=10_000, description="skipped steps within skip_window that roll back, 1..10,000"
    )
    skip_window: int = Field(
        100, ge=1, le=1_000_000, description="steps the skips are counted over, 1..1,000,000"
    )
    max_rollbacks: int = Field(
        3,
        ge=0,
        le=1000,
        description="rollbacks to the last good checkpoint before the job fails as diverged, "
        "0..1000",
    )


class HangSpec(StrictModel):
    """Hang watch of the service: a job whose steps stop is caught, its stacks kept, resumed.

    Bounds here are the absolute ones; the service's admin narrows them
    (``SHUNTER_HEALTH_HANG_*``), checked at submit."""

    factor: float = Field(
        10.0,
        ge=1,
        le=1000,
        description="hung after factor x the median step time with no new step, 1..1000",
    )
    floor_s: float = Field(
        300.0,
        ge=1,
        le=604_800,
        description="never hung before this many seconds without a new step, 1..604,800 "
        "(keep it above the longest eval or checkpoint save)",
    )
    startup_s: float = Field(
        900.0,
        ge=1,
        le=604_800,
        description="hung when an attempt reports no step this many seconds after its launch, "
        "1..604,800",
    )


class StragglerSpec(StrictModel):
    """Straggler and throughput watch: per-rank step times, judged by the service per window."""

    enabled: bool = Field(
        True, description="time every rank's steps and report them once per window"
    )
    window_steps: int = Field(
        50,
        ge=1,
        le=1_000_000,
        description="steps per window, 1..1,000,000; rounded up to a multiple of "
        "training.logging_steps (the times travel with the logged metrics)",
    )
    factor: float = Field(
        1.5,
        gt=1,
        le=100,
        description="a rank whose compute time over a window is above factor x the gang's "
        "median is a straggler, >1..100",
    )
    throughput_drop: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="a window whose samples/s or tokens/s is below this share of the job's own "
        "median window is a throughput drop, (0, 1)",
    )


class HealthSpec(StrictModel):
    """Training-health checks (issue #23)."""

    divergence: DivergenceSpec = Field(
        default_factory=DivergenceSpec, description="loss-spike / NaN guard"
    )
    hang: HangSpec = Field(
        default_factory=HangSpec, description="hang watch: stacks, then a resume from checkpoint"
    )
    straggler: StragglerSpec = Field(
        default_factory=StragglerSpec,
        description="per-rank step times; straggler and throughput-drop events",
    )


class NotifySpec(StrictModel):
    """Send this job's events to one of the team's webhook endpoints (signed with its
    secret). The service checks that the URL is registered and may be called."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        json_schema_extra={"pattern": "^https?://"},
        description="a webhook endpoint of the job's team (http:// or https://)",
    )
    events: list[WebhookEventType] | None = Field(
        None,
        min_length=1,
        description="the event types to send (omitted: all of them)",
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.lower().startswith(("http://", "https://")):
            raise ValueError(
                "use an http:// or https:// URL, one of your team's webhook endpoints"
                " (shunter webhooks create URL)"
            )
        return value
