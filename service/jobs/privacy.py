"""Queue privacy: a member sees other teams' jobs only as anonymous capacity.

The scheduler stores reasons that name other jobs ("would delay job-…", "skipped for now:
job-…"). ``redact_reasons`` replaces every job id a principal may not see with
``another team's job``; admins see everything. Reads only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal
from service.db.tables import Job

__all__ = ["JOB_ID_RE", "OTHER_TEAMS_JOB", "redact_reasons"]

JOB_ID_RE = re.compile(r"\bjob-[0-9a-z]{26}\b", re.IGNORECASE)  # service.jobs.submit.new_job_id
OTHER_TEAMS_JOB = "another team's job"


def redact_reasons(
    db: Session | Connection,
    *,
    principal: Principal,
    reasons: Iterable[str | None],
    known_teams: dict[str, str] | None = None,
) -> list[str | None]:
    """``reasons`` with the ids of jobs the principal may not see replaced.

    ``known_teams``: job id -> team already at hand (saves the lookup for those ids).
    """
    reasons = list(reasons)
    if principal.is_admin:
        return reasons
    teams = dict(known_teams or {})
    ids = {i for r in reasons if r for i in JOB_ID_RE.findall(r)} - teams.keys()
    if ids:
        rows = db.execute(select(Job.id, Job.team).where(Job.id.in_(sorted(ids)))).all()
        teams.update({row.id: row.team for row in rows})

    def one(match: re.Match[str]) -> str:
        team = teams.get(match.group(0))
        return match.group(0) if team == principal.team else OTHER_TEAMS_JOB

    return [JOB_ID_RE.sub(one, r) if r else r for r in reasons]
