"""``shunter admin ...``: teams and tokens (admin tokens only; the server enforces it).

Shares options, output and exit codes with :mod:`shunter.cli.jobs` (via ``user_common``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from shunter.cli.common import (
    JsonOpt,
    TokenOpt,
    UrlOpt,
    api,
    dump,
    merge_opts,
    out,
    print_json,
)
from shunter.client.models import TeamBudget

__all__ = ["admin_app"]

admin_app = typer.Typer(
    help="Admin: teams, tokens, retention (gc) and straggler node cordons.", no_args_is_help=True
)
team_app = typer.Typer(help="Teams.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
admin_app.add_typer(team_app, name="team")
admin_app.add_typer(token_app, name="token")


@team_app.command("create")
def team_create(
    name: Annotated[str, typer.Argument(help="Team name.")],
    quota_gpus: Annotated[float | None, typer.Option(help="Most GPUs the team may hold.")] = None,
    quota_cpus: Annotated[float | None, typer.Option(help="Most CPUs the team may hold.")] = None,
    quota_jobs: Annotated[
        int | None, typer.Option(help="Most jobs the team may run at once.")
    ] = None,
    weight: Annotated[float | None, typer.Option(help="Fair-share weight.")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Create a team."""
    opts = merge_opts(url, token, json_)
    quota: dict[str, Any] = {}
    # The API's Quota object: {max_gpus, max_cpus, max_running_jobs}, each optional.
    for key, value in (
        ("max_gpus", quota_gpus),
        ("max_cpus", quota_cpus),
        ("max_running_jobs", quota_jobs),
    ):
        if value is not None:
            quota[key] = value
    with api(opts) as client:
        team = client.create_team(name, quota=quota or None, weight=weight)
    print_json(dump(team)) if opts.json else out.print(f"created team [bold]{team.name}[/]")


@team_app.command("list")
def team_list(url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False) -> None:
    """List teams."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        teams = client.teams()
    if opts.json:
        print_json(dump(teams))
        return
    table = Table(title="Teams", title_justify="left")
    for col in ("NAME", "QUOTA", "WEIGHT", "MAX PRIORITY"):
        table.add_column(col)
    for t in teams:
        weight = str(t.weight if t.weight is not None else "-")
        table.add_row(t.name, str(t.quota or "-"), weight, t.max_priority or "-")
    out.print(table)


@team_app.command("patch")
def team_patch(
    name: Annotated[str, typer.Argument(help="Team name.")],
    weight: Annotated[float | None, typer.Option(help="Fair-share weight (> 0).")] = None,
    quota_gpus: Annotated[float | None, typer.Option(help="Most GPUs it may hold.")] = None,
    quota_cpus: Annotated[float | None, typer.Option(help="Most CPUs it may hold.")] = None,
    quota_jobs: Annotated[int | None, typer.Option(help="Most jobs running at once.")] = None,
    unlimited: Annotated[
        list[str] | None,
        typer.Option(help="Clear a quota: gpus | cpus | jobs (repeatable)."),
    ] = None,
    max_priority: Annotated[
        str | None, typer.Option(help="Highest priority members may submit: low|normal|high.")
    ] = None,
    budget_gpu_hours: Annotated[
        float | None, typer.Option(help="Budget: GPU-hours per period.")
    ] = None,
    budget_cpu_hours: Annotated[
        float | None, typer.Option(help="Budget: CPU-hours per period.")
    ] = None,
    budget_period: Annotated[str, typer.Option(help="Budget period: week | month.")] = "month",
    budget_starts: Annotated[
        str | None, typer.Option(help="Budget periods count from (ISO 8601).")
    ] = None,
    budget_mode: Annotated[
        str, typer.Option(help="Past the budget: hard (403) | soft (queue at low).")
    ] = "hard",
    no_budget: Annotated[bool, typer.Option(help="Remove the team's budget.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Change a team's weight, quota, max priority or budget; applies on the next tick."""
    opts = merge_opts(url, token, json_)
    budget: dict[str, Any] | None = None
    if budget_gpu_hours is not None or budget_cpu_hours is not None:
        budget = {"period": budget_period, "mode": budget_mode}
        for key, value in (
            ("gpu_hours", budget_gpu_hours),
            ("cpu_hours", budget_cpu_hours),
            ("starts", budget_starts),
        ):
            if value is not None:
                budget[key] = value
    keys = {"gpus": "max_gpus", "cpus": "max_cpus", "jobs": "max_running_jobs"}
    quota: dict[str, Any] = {keys[k]: None for k in unlimited or [] if k in keys}
    bad = [k for k in unlimited or [] if k not in keys]
    if bad:
        raise typer.BadParameter(f"--unlimited takes gpus, cpus or jobs, not {bad[0]!r}")
    for key, value in (
        ("max_gpus", quota_gpus),
        ("max_cpus", quota_cpus),
        ("max_running_jobs", quota_jobs),
    ):
        if value is not None:
            quota[key] = value
    with api(opts) as client:
        team = client.patch_team(
            name,
            weight=weight,
            quota=quota or None,
            max_priority=max_priority,
            budget=budget,
            clear_budget=no_budget,
        )
    if opts.json:
        print_json(dump(team))
        return
    out.print(
        f"team [bold]{team.name}[/]: weight {team.weight}, quota {team.quota or '-'}, "
        f"max_priority {team.max_priority}"
    )


def _budget_text(b: TeamBudget | None) -> str:
    """This period's use of the budget: used / limit (left) per resource, and if spent."""
    if b is None:
        return "-"
    parts = []
    if b.gpu_hours is not None:
        parts.append(f"GPU-h {b.gpu_hours_used:.2f}/{b.gpu_hours:g} left {b.gpu_hours_left:.2f}")
    if b.cpu_hours is not None:
        parts.append(f"CPU-h {b.cpu_hours_used:.2f}/{b.cpu_hours:g} left {b.cpu_hours_left:.2f}")
    spent = f" SPENT ({b.mode})" if b.exceeded else ""
    return f"{', '.join(parts)} per {b.period}{spent}"


@admin_app.command("usage")
def usage(
    teams: Annotated[list[str] | None, typer.Argument(help="Teams (default: all you see).")] = None,
    since: Annotated[
        str | None, typer.Option(help="ISO 8601 start, e.g. 2026-11-01T00:00:00Z.")
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """GPU- and CPU-seconds each team's jobs held (since a time)."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        names = teams or [t.name for t in client.teams()]
        rows = [client.team_usage(n, since=since) for n in names]
    if opts.json:
        print_json(dump(rows))
        return
    table = Table(title="Usage" + (f" since {since}" if since else ""), title_justify="left")
    for col in ("TEAM", "GPU-HOURS", "CPU-HOURS", "ATTEMPTS", "OWED (CLUSTER-HOURS)", "BUDGET"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.team,
            f"{r.gpu_seconds / 3600:.2f}",
            f"{r.cpu_seconds / 3600:.2f}",
            str(r.attempts),
            f"{r.owed_share_seconds / 3600:+.2f}",
            _budget_text(r.budget),
        )
    out.print(table)


@token_app.command("create")
def token_create(
    team: Annotated[str, typer.Option(help="Team the token acts for.")],
    name: Annotated[str, typer.Option(help="A label, e.g. the person or robot using it.")],
    role: Annotated[str, typer.Option(help="admin | member | viewer.")] = "member",
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Issue a token. Its secret is printed once and never again."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        issued = client.create_token(team=team, role=role, name=name)
    if opts.json:
        print_json(dump(issued))
        return
    out.print(f"token {issued.id} ({issued.role} of {issued.team}); shown once, keep it safe:")
    # Plain print so the secret is never wrapped or styled.
    print(issued.token)


@token_app.command("list")
def token_list(url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False) -> None:
    """List tokens (never their secrets)."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        tokens = client.tokens()
    if opts.json:
        print_json(dump(tokens))
        return
    table = Table(title="Tokens", title_justify="left")
    for col in ("ID", "NAME", "TEAM", "ROLE", "REVOKED"):
        table.add_column(col)
    for t in tokens:
        revoked = t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else "-"
        table.add_row(str(t.id), t.name, t.team or "-", t.role, revoked)
    out.print(table)


@admin_app.command("gc")
def gc(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age of finished jobs to delete: 30d, 12h, 2w.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List them; delete nothing.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Delete finished jobs (rows and storage) older than --older-than; each is audited."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        result = client.gc(older_than, dry_run=dry_run)
    if opts.json:
        print_json(result)
        return
    verb = "would delete" if dry_run else "deleted"
    ids = result["job_ids"] if dry_run else result["deleted"]
    out.print(f"{verb} {len(ids)} job(s)" + "".join(f"\n  {i}" for i in ids))


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="Token id.")],
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Revoke a token; requests with it get 401 from then on."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        client.revoke_token(token_id)
    print_json({"revoked": token_id}) if opts.json else out.print(f"revoked {token_id}")


@admin_app.command("nodes")
def nodes(url: UrlOpt = None, token: TokenOpt = None, json_: JsonOpt = False) -> None:
    """Nodes the straggler watch flagged; cordoned ones get no new job until the time shown."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        rows = client.nodes()
    if opts.json:
        print_json(dump(rows))
        return
    table = Table(title="Flagged nodes", title_justify="left")
    for col in ("NODE", "IP", "CORDONED UNTIL", "FLAGS", "TOTAL", "LAST JOB", "REASON"):
        table.add_column(col)
    for n in rows:
        until = n.cordoned_until.isoformat(timespec="seconds") if n.cordoned_until else "-"
        until = until if n.cordoned else f"- (was {until})" if n.cordoned_until else "-"
        table.add_row(
            n.node_id,
            n.node_ip or "-",
            until,
            str(n.flags),
            str(n.total_flags),
            n.last_job_id or "-",
            n.reason or "-",
        )
    out.print(table)


@admin_app.command("uncordon")
def uncordon(
    node_id: Annotated[str, typer.Argument(help="The Ray node id.")],
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """End a node's straggler cordon now and clear its flags."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        client.uncordon(node_id)
    print_json({"node_id": node_id, "cordoned": False}) if opts.json else out.print(
        f"node {node_id} uncordoned"
    )
