"""``shunter doctor``: check a deployment from the API's side, each check with its fix.

Checks, in order: the database is reachable and migrated to the code's head; Ray is reachable
and runs the same Ray version as this server; a probe job on the cluster (``worker.probe``, on a
GPU when the cluster has any) can write the job storage, sees GPUs where Ray advertises them,
and reports the Hugging Face cache and Hub access. A check that cannot run because an earlier
one failed is reported as skipped, never as passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from sqlalchemy import text

from service.db.engine import Database
from service.db.migrate import revisions
from service.launch import Launcher
from service.settings import Settings

__all__ = ["Check", "Outcome", "run_checks"]


class Outcome(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIPPED = "skipped"


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    outcome: Outcome
    detail: str
    fix: str = ""


def _database(db: Database) -> Check:
    name = "database reachable and migrated"
    try:
        with db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        current, heads = revisions(db.engine)
    except Exception as e:  # any driver error is the finding
        return Check(
            name=name,
            outcome=Outcome.FAIL,
            detail=f"{type(e).__name__}: {str(e)[:300]}",
            fix="check SHUNTER_DATABASE_URL and that the database server accepts connections",
        )
    if current != heads:
        return Check(
            name=name,
            outcome=Outcome.FAIL,
            detail=f"database at {sorted(current) or 'no revision'}, code at {sorted(heads)}",
            fix="run `shunter db upgrade` (or set SHUNTER_MIGRATE_ON_START=true)",
        )
    return Check(name=name, outcome=Outcome.OK, detail=f"at {', '.join(sorted(heads))}")


def _ray(launcher: Launcher) -> tuple[Check, Any]:
    name = "Ray reachable, same version"
    try:
        cluster = launcher.cluster()
        theirs = getattr(launcher, "ray_version", lambda: None)()
    except Exception as e:
        return Check(
            name=name,
            outcome=Outcome.FAIL,
            detail=f"{type(e).__name__}: {str(e)[:300]}",
            fix="check SHUNTER_RAY_ADDRESS (the dashboard URL, http://head:8265) and that "
            "RAY_AUTH_TOKEN matches the cluster's token",
        ), None
    try:
        ours: str | None = version("ray")
    except PackageNotFoundError:
        ours = None
    alive = [n for n in cluster.nodes if n.alive]
    detail = (
        f"{len(alive)} node(s) alive, {sum(n.total_cpus for n in alive):g} CPUs, "
        f"{sum(n.total_gpus for n in alive):g} GPUs; cluster Ray {theirs}, server Ray {ours}"
    )
    if theirs and ours and theirs != ours:
        return Check(
            name=name,
            outcome=Outcome.FAIL,
            detail=detail,
            fix=f"run the same Ray on the cluster and the server (pyproject pins ray=={ours})",
        ), cluster
    if not alive:
        return Check(
            name=name, outcome=Outcome.FAIL, detail=detail, fix="start Ray worker nodes"
        ), cluster
    return Check(name=name, outcome=Outcome.OK, detail=detail), cluster


def _probe_checks(
    report: dict[str, Any], *, cluster_gpus: float, settings: Settings
) -> list[Check]:
    storage = report["storage"]
    out = [
        Check(
            name="storage writable from a worker",
            outcome=Outcome.OK if storage["writable"] else Outcome.FAIL,
            detail=f"{settings.storage}: {storage['error'] or 'written and read back'}",
            fix=""
            if storage["writable"]
            else "mount the same shared volume at SHUNTER_STORAGE on the API and every Ray node, "
            "writable by the Ray user (uid 10001 in our images)",
        )
    ]
    gpus = report["gpus"]
    if cluster_gpus == 0:
        out.append(
            Check(
                name="GPUs visible to a worker",
                outcome=Outcome.WARN,
                detail="the cluster advertises no GPUs; jobs run on CPUs only",
                fix="add GPU worker nodes (docker compose --profile gpu, or the chart's gpu group)",
            )
        )
    else:
        seen = int(gpus.get("count") or 0)
        out.append(
            Check(
                name="GPUs visible to a worker",
                outcome=Outcome.OK if seen > 0 else Outcome.FAIL,
                detail=f"Ray advertises {cluster_gpus:g}; a GPU worker's torch sees {seen}"
                + (f" ({', '.join(gpus.get('names') or [])})" if seen else "")
                + (f"; {gpus['error']}" if gpus.get("error") else ""),
                fix=""
                if seen
                else "install the NVIDIA container toolkit / device plugin and use the "
                "worker-cuda image",
            )
        )
    hf = report["hf"]
    hub_ok = hf["hub"] == "reachable" or hf["hub"].startswith("offline")
    out.append(
        Check(
            name="HF cache and Hub access",
            outcome=Outcome.OK if hf["cache_writable"] and hub_ok else Outcome.WARN,
            detail=f"HF_HOME {hf['hf_home']} "
            f"{'writable' if hf['cache_writable'] else 'NOT writable'}; Hub {hf['hub']}; "
            f"server hub_access={settings.hub_access}",
            fix=""
            if hf["cache_writable"] and hub_ok
            else "mount a shared, writable HF cache at HF_HOME on the workers; without Hub "
            "access set SHUNTER_HUB_ACCESS=off so submits say so",
        )
    )
    return out


def run_checks(
    *, settings: Settings, db: Database, launcher: Launcher, probe_timeout_s: float = 300.0
) -> list[Check]:
    checks = [_database(db)]
    ray_check, cluster = _ray(launcher)
    checks.append(ray_check)
    names = (
        "storage writable from a worker",
        "GPUs visible to a worker",
        "HF cache and Hub access",
    )
    probe: Callable[..., dict[str, Any]] | None = getattr(launcher, "probe", None)
    if cluster is None or probe is None:
        why = "Ray is not reachable" if cluster is None else "this launcher cannot run a probe"
        return checks + [Check(name=n, outcome=Outcome.SKIPPED, detail=why) for n in names]
    cluster_gpus = sum(n.total_gpus for n in cluster.nodes if n.alive)
    try:
        report = probe(storage=settings.storage, gpu=cluster_gpus > 0, timeout_s=probe_timeout_s)
    except Exception as e:
        detail = f"the probe job failed: {type(e).__name__}: {str(e)[:300]}"
        fix = "see the probe job's log in the Ray dashboard; check free CPUs on the cluster"
        return checks + [Check(name=n, outcome=Outcome.FAIL, detail=detail, fix=fix) for n in names]
    return checks + _probe_checks(report, cluster_gpus=cluster_gpus, settings=settings)
