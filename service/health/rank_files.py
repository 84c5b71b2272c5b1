"""The hang watch's files, beside the job's logs: where each rank runs, and the stacks.

Layout: ``<root>/<job id>/health/attempt-<n>/rank-<r>.json`` (one per rank, written when the
worker reports at start: ``{"rank", "pid", "node_id", "node_ip"}``) and ``stacks.txt`` (the
dump of a hung attempt, served by ``GET /v1/jobs/{id}/stacks?attempt=n``). ``root`` is the
log store's (``service.jobs.logs.store_root``), so these go when the job's storage goes.
One file per rank: concurrent reports never write the same file; each is replaced atomically.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from service.accounts.auth import Principal
from service.db.engine import Database
from service.errors import NotFound
from service.jobs.logs import store_root
from service.jobs.queries import visible_job
from service.launch import StackTarget
from service.schemas.internal import WorkerIn
from service.settings import Settings

__all__ = ["HealthFiles", "files_for", "job_stacks"]

_RANK = re.compile(r"^rank-(\d+)\.json$")
STACKS = "stacks.txt"


class HealthFiles:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, job_id: str, attempt: int) -> Path:
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise ValueError(f"bad job id {job_id!r}")
        return self.root / job_id / "health" / f"attempt-{int(attempt)}"

    def _write(self, path: Path, text: str) -> None:
        # Private, like every directory the service makes (stacks show code and paths).
        path.parent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.parent.mkdir(exist_ok=True, mode=0o700)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def put_worker(self, *, job_id: str, attempt: int, worker: WorkerIn) -> None:
        doc = worker.model_dump(mode="json")
        self._write(self._dir(job_id, attempt) / f"rank-{worker.rank}.json", json.dumps(doc))

    def workers(self, *, job_id: str, attempt: int) -> list[StackTarget]:
        """The ranks that reported, by rank (a torn or foreign file is skipped)."""
        out = []
        folder = self._dir(job_id, attempt)
        for path in sorted(folder.glob("rank-*.json")) if folder.is_dir() else []:
            if _RANK.match(path.name) is None:
                continue
            try:
                w = WorkerIn.model_validate_json(path.read_text())
            except (OSError, ValueError):
                continue
            out.append(StackTarget(rank=w.rank, pid=w.pid, node_id=w.node_id, node_ip=w.node_ip))
        return sorted(out, key=lambda t: t.rank)

    def put_stacks(self, *, job_id: str, attempt: int, text: str) -> None:
        self._write(self._dir(job_id, attempt) / STACKS, text)

    def stacks(self, *, job_id: str, attempt: int) -> str | None:
        try:
            return (self._dir(job_id, attempt) / STACKS).read_text()
        except OSError:
            return None


def files_for(settings: Settings) -> HealthFiles:
    return HealthFiles(store_root(storage=settings.storage, home=settings.home))


def job_stacks(
    db: Database, files: HealthFiles, *, principal: Principal, job_id: str, attempt: int
) -> str:
    """The stacks dumped when ``attempt`` of a job the principal sees hung; 404 when none."""
    db.read(lambda s: visible_job(s, principal=principal, job_id=job_id))
    text = files.stacks(job_id=job_id, attempt=attempt)
    if text is None:
        raise NotFound(f"job {job_id} has no stacks for attempt {attempt}: it did not hang")
    return text
