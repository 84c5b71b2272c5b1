"""``shunter admin ...``: teams and tokens (admin tokens only; the server enforces it).

Shares options, output and exit codes with :mod:`shunter.cli.jobs` (via ``user_common``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from shunter.cli.common import (
    Opts,
    api,
    common_options,
    dump,
    emit,
    grid,
    out,
    print_json,
    reply,
)
from shunter.client.responses import NodeCordon, Team, TeamBudget, TokenInfo

__all__ = ["admin_app"]

admin_app = typer.Typer(
    help="Admin: teams, tokens, retention (gc) and straggler node cordons.", no_args_is_help=True
)
team_app = typer.Typer(help="Teams.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens.", no_args_is_help=True)
admin_app.add_typer(team_app, name="team")
admin_app.add_typer(token_app, name="token")


def _given(**values: Any) -> dict[str, Any]:
    """The keyword arguments that were given (not None)."""
    return {key: value for key, value in values.items() if value is not None}


@team_app.command("create")
@common_options
def team_create(
    opts: Opts,
    name: Annotated[str, typer.Argument(help="Team name.")],
    quota_gpus: Annotated[float | None, typer.Option(help="Most GPUs the team may hold.")] = None,
    quota_cpus: Annotated[float | None, typer.Option(help="Most CPUs the team may hold.")] = None,
    quota_jobs: Annotated[
        int | None, typer.Option(help="Most jobs the team may run at once.")
    ] = None,
    weight: Annotated[float | None, typer.Option(help="Fair-share weight.")] = None,
) -> None:
    """Create a team."""
    # The API's Quota object: {max_gpus, max_cpus, max_running_jobs}, each optional.
    quota = _given(max_gpus=quota_gpus, max_cpus=quota_cpus, max_running_jobs=quota_jobs)
    with api(opts) as client:
        team = client.create_team(name, quota=quota or None, weight=weight)
    reply(opts, team, lambda t: f"created team [bold]{t.name}[/]")


@team_app.command("list")
@common_options
def team_list(opts: Opts) -> None:
    """List teams."""
    emit(opts, lambda client: client.teams(), _teams_table)


def _teams_table(teams: list[Team]) -> Table:
    rows = (
        (
            t.name,
            str(t.quota or "-"),
            str("-" if t.weight is None else t.weight),
            t.max_priority or "-",
        )
        for t in teams
    )
    return grid("Teams", ("NAME", "QUOTA", "WEIGHT", "MAX PRIORITY"), rows)


@team_app.command("patch")
@common_options
def team_patch(
    opts: Opts,
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
) -> None:
    """Change a team's weight, quota, max priority or budget; applies on the next tick."""
    budget: dict[str, Any] | None = None
    if budget_gpu_hours is not None or budget_cpu_hours is not None:
        budget = {"period": budget_period, "mode": budget_mode} | _given(
            gpu_hours=budget_gpu_hours, cpu_hours=budget_cpu_hours, starts=budget_starts
        )
    keys = {"gpus": "max_gpus", "cpus": "max_cpus", "jobs": "max_running_jobs"}
    quota: dict[str, Any] = {keys[k]: None for k in unlimited or [] if k in keys}
    bad = [k for k in unlimited or [] if k not in keys]
    if bad:
        raise typer.BadParameter(f"--unlimited takes gpus, cpus or jobs, not {bad[0]!r}")
    quota |= _given(max_gpus=quota_gpus, max_cpus=quota_cpus, max_running_jobs=quota_jobs)
    with api(opts) as client:
        team = client.patch_team(
            name,
            weight=weight,
            quota=quota or None,
            max_priority=max_priority,
            budget=budget,
            clear_budget=no_budget,
        )
    reply(
        opts,
        team,
        lambda t: (
            f"team [bold]{t.name}[/]: weight {t.weight}, quota {t.quota or '-'}, "
            f"max_priority {t.max_priority}"
        ),
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
@common_options
def usage(
    opts: Opts,
    teams: Annotated[list[str] | None, typer.Argument(help="Teams (default: all you see).")] = None,
    since: Annotated[
        str | None, typer.Option(help="ISO 8601 start, e.g. 2026-11-01T00:00:00Z.")
    ] = None,
) -> None:
    """GPU- and CPU-seconds each team's jobs held (since a time)."""
    with api(opts) as client:
        names = teams or [t.name for t in client.teams()]
        rows = [client.team_usage(n, since=since) for n in names]
    cells = (
        (
            r.team,
            f"{r.gpu_seconds / 3600:.2f}",
            f"{r.cpu_seconds / 3600:.2f}",
            str(r.attempts),
            f"{r.owed_share_seconds / 3600:+.2f}",
            _budget_text(r.budget),
        )
        for r in rows
    )
    columns = ("TEAM", "GPU-HOURS", "CPU-HOURS", "ATTEMPTS", "OWED (CLUSTER-HOURS)", "BUDGET")
    title = "Usage" + (f" since {since}" if since else "")
    reply(opts, rows, lambda _: grid(title, columns, cells))


@token_app.command("create")
@common_options
def token_create(
    opts: Opts,
    team: Annotated[str, typer.Option(help="Team the token acts for.")],
    name: Annotated[str, typer.Option(help="A label, e.g. the person or robot using it.")],
    role: Annotated[str, typer.Option(help="admin | member | viewer.")] = "member",
) -> None:
    """Issue a token. Its secret is printed once and never again."""
    with api(opts) as client:
        issued = client.create_token(team=team, role=role, name=name)
    if opts.json:
        print_json(dump(issued))
        return
    out.print(f"token {issued.id} ({issued.role} of {issued.team}); shown once, keep it safe:")
    # Plain print so the secret is never wrapped or styled.
    print(issued.token)


@token_app.command("list")
@common_options
def token_list(opts: Opts) -> None:
    """List tokens (never their secrets)."""
    emit(opts, lambda client: client.tokens(), _tokens_table)


def _tokens_table(tokens: list[TokenInfo]) -> Table:
    rows = (
        (str(t.id), t.name, t.team or "-", t.role, _when(t.revoked_at) if t.revoked_at else "-")
        for t in tokens
    )
    return grid("Tokens", ("ID", "NAME", "TEAM", "ROLE", "REVOKED"), rows)


@admin_app.command("gc")
@common_options
def gc(
    opts: Opts,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age of finished jobs to delete: 30d, 12h, 2w.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List them; delete nothing.")] = False,
) -> None:
    """Delete finished jobs (rows and storage) older than --older-than; each is audited."""
    with api(opts) as client:
        result = client.gc(older_than, dry_run=dry_run)
    if opts.json:
        print_json(result)
        return
    verb = "would delete" if dry_run else "deleted"
    ids = result["job_ids"] if dry_run else result["deleted"]
    out.print(f"{verb} {len(ids)} job(s)" + "".join(f"\n  {i}" for i in ids))


@token_app.command("revoke")
@common_options
def token_revoke(
    opts: Opts,
    token_id: Annotated[str, typer.Argument(help="Token id.")],
) -> None:
    """Revoke a token; requests with it get 401 from then on."""
    with api(opts) as client:
        client.revoke_token(token_id)
    reply(opts, {"revoked": token_id}, lambda _: f"revoked {token_id}")


@admin_app.command("nodes")
@common_options
def nodes(opts: Opts) -> None:
    """Nodes the straggler watch flagged; cordoned ones get no new job until the time shown."""
    emit(opts, lambda client: client.nodes(), _nodes_table)


def _nodes_table(rows: list[NodeCordon]) -> Table:
    cells = (
        (
            n.node_id,
            n.node_ip or "-",
            _cordon_text(n.cordoned, n.cordoned_until),
            str(n.flags),
            str(n.total_flags),
            n.last_job_id or "-",
            n.reason or "-",
        )
        for n in rows
    )
    columns = ("NODE", "IP", "CORDONED UNTIL", "FLAGS", "TOTAL", "LAST JOB", "REASON")
    return grid("Flagged nodes", columns, cells)


def _when(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


def _cordon_text(cordoned: bool, until: datetime | None) -> str:
    if until is None:
        return "-"
    return _when(until) if cordoned else f"- (was {_when(until)})"


@admin_app.command("uncordon")
@common_options
def uncordon(
    opts: Opts,
    node_id: Annotated[str, typer.Argument(help="The Ray node id.")],
) -> None:
    """End a node's straggler cordon now and clear its flags."""
    with api(opts) as client:
        client.uncordon(node_id)
    reply(opts, {"node_id": node_id, "cordoned": False}, lambda _: f"node {node_id} uncordoned")
