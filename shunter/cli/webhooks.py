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

from shunter.cli.common import JsonOpt, TokenOpt, UrlOpt, api, dump, merge_opts, out, print_json
from shunter.client.models import WebhookDelivery, WebhookEndpoint

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
    table = Table(title="Webhook endpoints", title_justify="left")
    for col in ("ID", "TEAM", "URL", "EVENTS", "STATE", "FAILURES"):
        table.add_column(col)
    for ep in endpoints:
        state = "enabled" if ep.enabled else f"disabled: {ep.disabled_reason}"
        events = ", ".join(e.removeprefix("job.") for e in ep.events) or "(notify: only)"
        table.add_row(ep.id, ep.team, escape(ep.url), events, escape(state), str(ep.failures))
    return table


def deliveries_table(deliveries: list[WebhookDelivery]) -> Table:
    table = Table(title="Webhook deliveries (newest first)", title_justify="left")
    table.add_column("ID", no_wrap=True)  # what `resend` takes: never cut
    for col in ("TYPE", "JOB", "ENDPOINT", "STATUS", "TRIES", "LAST", "NEXT"):
        table.add_column(col)
    for d in deliveries:
        last = (
            "-"
            if d.last_status_code is None and not d.last_error
            else (str(d.last_status_code or d.last_error))
        )
        table.add_row(
            d.id, d.type, d.job_id, d.endpoint_id, d.status, str(d.attempts), escape(last[:40]),
            _when(d.next_attempt_at),
        )  # fmt: skip
    return table


@webhooks_app.command("create")
def create(
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
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Register a receiver and print its signing secret (shown only this once)."""
    opts = merge_opts(url, token, json_)
    events = [] if no_events else event
    with api(opts) as client:
        ep = client.create_webhook(endpoint_url, events=events, description=description, team=team)
    if opts.json:
        print_json(dump(ep))
        return
    out.print(_endpoint_line(ep))
    out.print(f"secret (shown once): {ep.secret}")


@webhooks_app.command("list")
def list_(
    team: TeamOpt = None, url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False
) -> None:
    """Your team's endpoints, and whether each is enabled (a disabled one says why)."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        endpoints = client.webhooks(team=team)
    print_json(dump(endpoints)) if opts.json else out.print(endpoints_table(endpoints))


@webhooks_app.command("deliveries")
def deliveries(
    job: Annotated[str | None, typer.Option("--job", help="Only this job's.")] = None,
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="Only this one's.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="pending | delivered | failed")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    team: TeamOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """What was sent, is pending, or failed; newest first."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        rows = client.webhook_deliveries(
            job=job, endpoint=endpoint, status=status, team=team, limit=limit
        )
    print_json(dump(rows)) if opts.json else out.print(deliveries_table(rows))


@webhooks_app.command("resend")
def resend(
    delivery_id: Annotated[str, typer.Argument(help="Delivery id (msg_...).")],
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Send a delivery again now (same webhook-id, fresh retry schedule)."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        d = client.resend_webhook(delivery_id)
    print_json(dump(d)) if opts.json else out.print(f"{d.id}: {d.status} (queued again)")


@webhooks_app.command("rotate")
def rotate(
    endpoint_id: EndpointArg, url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False
) -> None:
    """A new secret (shown once); the old one keeps signing beside it for a while."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        rotated = client.rotate_webhook_secret(endpoint_id)
    if opts.json:
        print_json(rotated)
        return
    out.print(f"secret (shown once): {rotated['secret']}")
    out.print(f"the old secret signs too until {rotated['previous_secret_valid_until']}")


def _set_enabled(
    endpoint_id: str, enabled: bool, url: str | None, token: str | None, as_json: bool
) -> None:
    opts = merge_opts(url, token, as_json)
    with api(opts) as client:
        ep = client.patch_webhook(endpoint_id, enabled=enabled)
    print_json(dump(ep)) if opts.json else out.print(_endpoint_line(ep))


@webhooks_app.command("enable")
def enable(
    endpoint_id: EndpointArg, url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False
) -> None:
    """Re-enable a disabled endpoint; its pending deliveries resume."""
    _set_enabled(endpoint_id, True, url, token, json_)


@webhooks_app.command("disable")
def disable(
    endpoint_id: EndpointArg, url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False
) -> None:
    """Stop sending to an endpoint (deliveries wait until it is enabled)."""
    _set_enabled(endpoint_id, False, url, token, json_)


@webhooks_app.command("delete")
def delete(
    endpoint_id: EndpointArg, url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False
) -> None:
    """Delete an endpoint and its deliveries."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        ep = client.delete_webhook(endpoint_id)
    print_json(dump(ep)) if opts.json else out.print(f"deleted {ep.id} ({ep.url})")
