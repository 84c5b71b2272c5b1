"""``shunter webhooks ...``: a team's webhook endpoints and their deliveries.

``create`` prints the endpoint's ``whsec_`` secret once (and ``rotate`` the new one);
``deliveries`` lists what was sent, is pending or failed; ``resend`` sends one again under
the same ``webhook-id``. Exit codes as the job commands (``shunter.cli.jobs``).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from shunter.cli.common import Opts, api, common_options, dump, emit, grid, out, print_json
from shunter.client.responses import WebhookDelivery, WebhookEndpoint

__all__ = ["webhooks_app"]

webhooks_app = typer.Typer(
    help="Webhooks: signed notifications of job events.", no_args_is_help=True
)
EndpointArg = Annotated[str, typer.Argument(help="Endpoint id (whe_...).")]
TeamOpt = Annotated[str | None, typer.Option("--team", help="Another team (admins).")]


def _when(value: object) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


def _endpoint_line(ep: WebhookEndpoint) -> str:
    state = "enabled" if ep.enabled else f"DISABLED ({ep.disabled_reason})"
    return escape(f"{ep.id} {ep.url} [{state}]")


def endpoints_table(endpoints: list[WebhookEndpoint]) -> Table:
    rows = (
        (
            ep.id,
            ep.team,
            escape(ep.url),
            ", ".join(e.removeprefix("job.") for e in ep.events) or "(notify: only)",
            escape("enabled" if ep.enabled else f"disabled: {ep.disabled_reason}"),
            str(ep.failures),
        )
        for ep in endpoints
    )
    return grid("Webhook endpoints", ("ID", "TEAM", "URL", "EVENTS", "STATE", "FAILURES"), rows)


def deliveries_table(deliveries: list[WebhookDelivery]) -> Table:
    columns = ("ID", "TYPE", "JOB", "ENDPOINT", "STATUS", "TRIES", "LAST", "NEXT")
    rows = (
        (
            d.id,
            d.type,
            d.job_id,
            d.endpoint_id,
            d.status,
            str(d.attempts),
            escape(_last_outcome(d.last_status_code, d.last_error)[:40]),
            _when(d.next_attempt_at),
        )
        for d in deliveries
    )
    # The id is what `resend` takes: never cut.
    return grid("Webhook deliveries (newest first)", columns, rows, keep_first=True)


def _last_outcome(status_code: int | None, error: str | None) -> str:
    return "-" if status_code is None and not error else str(status_code or error)


@webhooks_app.command("create")
@common_options
def create(
    opts: Opts,
    endpoint_url: Annotated[str, typer.Argument(help="The receiver's http(s) URL.")],
    event: Annotated[
        list[str] | None,
        typer.Option("--event", help="An event type for every job (repeatable; default: all)."),
    ] = None,
    no_events: Annotated[
        bool, typer.Option("--no-events", help="Only jobs whose notify: names the URL.")
    ] = False,
    description: Annotated[str, typer.Option(help="A note.")] = "",
    team: TeamOpt = None,
) -> None:
    """Register a receiver and print its signing secret (shown only this once)."""
    events = [] if no_events else event
    with api(opts) as client:
        ep = client.create_webhook(endpoint_url, events=events, description=description, team=team)
    if opts.json:
        print_json(dump(ep))
        return
    out.print(_endpoint_line(ep))
    out.print(f"secret (shown once): {ep.secret}")


@webhooks_app.command("list")
@common_options
def list_(opts: Opts, team: TeamOpt = None) -> None:
    """Your team's endpoints, and whether each is enabled (a disabled one says why)."""
    emit(opts, lambda client: client.webhooks(team=team), endpoints_table)


@webhooks_app.command("deliveries")
@common_options
def deliveries(
    opts: Opts,
    job: Annotated[str | None, typer.Option("--job", help="Only this job's.")] = None,
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="Only this one's.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="pending | delivered | failed")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    team: TeamOpt = None,
) -> None:
    """What was sent, is pending, or failed; newest first."""
    emit(
        opts,
        lambda client: client.webhook_deliveries(
            job=job, endpoint=endpoint, status=status, team=team, limit=limit
        ),
        deliveries_table,
    )


@webhooks_app.command("resend")
@common_options
def resend(
    opts: Opts,
    delivery_id: Annotated[str, typer.Argument(help="Delivery id (msg_...).")],
) -> None:
    """Send a delivery again now (same webhook-id, fresh retry schedule)."""
    emit(
        opts,
        lambda client: client.resend_webhook(delivery_id),
        lambda d: f"{d.id}: {d.status} (queued again)",
    )


@webhooks_app.command("rotate")
@common_options
def rotate(opts: Opts, endpoint_id: EndpointArg) -> None:
    """A new secret (shown once); the old one keeps signing beside it for a while."""
    with api(opts) as client:
        rotated = client.rotate_webhook_secret(endpoint_id)
    if opts.json:
        print_json(rotated)
        return
    out.print(f"secret (shown once): {rotated['secret']}")
    out.print(f"the old secret signs too until {rotated['previous_secret_valid_until']}")


def _set_enabled(opts: Opts, endpoint_id: str, enabled: bool) -> None:
    emit(opts, lambda client: client.patch_webhook(endpoint_id, enabled=enabled), _endpoint_line)


@webhooks_app.command("enable")
@common_options
def enable(opts: Opts, endpoint_id: EndpointArg) -> None:
    """Re-enable a disabled endpoint; its pending deliveries resume."""
    _set_enabled(opts, endpoint_id, True)


@webhooks_app.command("disable")
@common_options
def disable(opts: Opts, endpoint_id: EndpointArg) -> None:
    """Stop sending to an endpoint (deliveries wait until it is enabled)."""
    _set_enabled(opts, endpoint_id, False)


@webhooks_app.command("delete")
@common_options
def delete(opts: Opts, endpoint_id: EndpointArg) -> None:
    """Delete an endpoint and its deliveries."""
    emit(
        opts,
        lambda client: client.delete_webhook(endpoint_id),
        lambda ep: f"deleted {ep.id} ({ep.url})",
    )
