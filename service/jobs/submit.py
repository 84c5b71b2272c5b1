"""Submitting a job: parse -> validate -> fit checks -> one transaction (job + event + key).

``check_submission`` is every check a submission gets, without writing: pass 1 (the JobSpec
models and rules), pass 2 (data roots, paths, model folders, cluster capacity, what the
server can reach) and the team's checks (priority cap, quota, ``init_from``), the last in a
read-only transaction. ``dry_run`` is that plus the plan (``shunter.jobspec.plan``); a real
submit runs the same passes, the team's checks inside its write transaction after the
idempotency lookup (a replay is answered before them, as before).

Idempotency: ``Idempotency-Key`` is unique per (team, key) in the database. A retry with the
same key and the same body (SHA-256 of the canonical JSON of the parsed document, so JSON and
YAML of one spec match) gets the same job back; another body gets 422. Two concurrent first
tries both pass the "no such key" read on PostgreSQL; one commit then hits the unique
constraint, rolls back, and its re-run finds the winner's row — never a second job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_writer
from service.accounts.budgets import budget_state
from service.db.engine import Database
from service.db.ids import sortable_id
from service.db.tables import Event, IdempotencyKey, Job, Team
from service.errors import (
    BadRequest,
    Forbidden,
    PayloadTooLarge,
    Unprocessable,
    UnsupportedMediaType,
)
from service.jobs.accelerator_check import accelerator_check
from service.jobs.admission import resource_errors, validate_spec
from service.jobs.hub import EcosystemPolicy, ecosystem_errors, policy_from_settings
from service.jobs.init_from import resolve_init_from
from service.jobs.plan_facts import plan_facts
from service.jobs.read_model import first_queue_position, job_read
from service.jobs.reproduce import submit_record, submitted_form
from service.launch import ClusterResources
from service.objects.store import record_refs, resolve_inputs
from service.policy.accelerators import AcceleratorType, admin_catalog
from service.schemas.jobs import DryRunRead, JobRead
from service.settings import Settings
from service.webhooks.endpoints import notify_errors
from shunter.jobspec import JobSpec, SpecError, format_spec_errors
from shunter.jobspec.elastic import start_width
from shunter.jobspec.errors import FieldError
from shunter.jobspec.parse import BodyError, parse_body
from shunter.jobspec.plan import plan_for
from shunter.jobspec.spec import is_store_ref
from shunter.jobspec.vocab import EventType, priority_rank

__all__ = [
    "Submission",
    "SubmitContext",
    "SubmitResult",
    "body_sha256",
    "check_submission",
    "dry_run",
    "insert_job",
    "new_job_id",
    "parse_document",
    "submit_job",
    "team_checks",
    "validate_document",
]

_IDEMPOTENCY_KEY_MAX = 255
_CURL_DEFAULT = "application/x-www-form-urlencoded"


def new_job_id() -> str:
    """``job-`` and 26 characters that sort by creation time (``service.db.ids``)."""
    return sortable_id("job")


def body_sha256(document: Any) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class SubmitContext:
    """What a submit needs from the server, built once per request (``http.deps``).

    ``cluster``: the scheduler's last view of the cluster (``scheduler.cluster_view``), or
    None when it has never been read (Ray unreachable): the capacity check is then left to
    the scheduler, which keeps the job queued with a reason."""

    data_roots: list[Path]  # the server's and the team's
    storage: str
    cluster: ClusterResources | None
    # Said in a capacity error when that view is old because Ray cannot be read now.
    cluster_note: str | None = None
    ecosystem: EcosystemPolicy | None = None
    allow_pickle_weights: bool = False
    gpu_memory_bytes: int | None = None
    # Buckets a spec may name as s3://... beyond the storage's own (SHUNTER_DATA_BUCKETS).
    data_buckets: tuple[str, ...] = ()
    # SHUNTER_ACCELERATOR_TYPES (``policy.accelerators.admin_catalog``).
    accelerator_types: Mapping[str, AcceleratorType] = field(default_factory=dict)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        team_roots: list[Path],
        cluster: ClusterResources | None,
        cluster_note: str | None = None,
    ) -> SubmitContext:
        """The one builder: the server's settings, the team's data roots and a cluster view
        (the API's submits and dry runs, a sweep's trials: ``service.sweeps``)."""
        return cls(
            data_roots=[*settings.data_roots, *team_roots],
            storage=settings.storage,
            cluster=cluster,
            cluster_note=cluster_note,
            ecosystem=policy_from_settings(settings),
            allow_pickle_weights=settings.allow_pickle_weights,
            gpu_memory_bytes=settings.gpu_memory_bytes,
            data_buckets=tuple(settings.data_buckets),
            accelerator_types=admin_catalog(settings.accelerator_types),
        )


@dataclass(frozen=True, kw_only=True)
class SubmitResult:
    job: JobRead
    created: bool  # False = an idempotent replay


def _spec_error(errors: list[FieldError]) -> Unprocessable:
    body = format_spec_errors(errors)
    return Unprocessable(body["message"], detail=body["detail"])


@dataclass(frozen=True, kw_only=True)
class Submission:
    """A body that passed every check: the parsed document, the typed spec, the resolved one."""

    document: Any
    spec: JobSpec
    resolved: dict[str, Any]


def parse_document(raw: bytes, content_type: str | None) -> Any:
    """A request body (JSON, or YAML as ``application/yaml``) as a document; 4xx as a submit."""
    if content_type and content_type.split(";")[0].strip().lower() == _CURL_DEFAULT:
        # ``curl -d @spec.json`` labels JSON as a form; no form is ever a valid spec.
        content_type = "application/json"
    try:
        return parse_body(raw, content_type)
    except BodyError as exc:
        kind = {413: PayloadTooLarge, 415: UnsupportedMediaType, 422: Unprocessable}.get(
            exc.status, BadRequest
        )
        raise kind(f"body: {exc.message}", detail="bad_body") from None


def validate_document(document: Any, ctx: SubmitContext) -> JobSpec:
    """Pass 1 and pass 2 of a parsed spec document, as a submit runs them: no database, no
    writes; 422 on errors. ``ctx.cluster`` None: no capacity check; ``ctx.cluster_note``:
    added to a capacity error (how old that view is). Accelerator types: known names, and
    ``resources.accelerator`` narrowed to the types whose card holds the memory plan
    (``jobs.accelerator_check``)."""
    try:
        spec = validate_spec(
            document, data_roots=ctx.data_roots, allow_pickle_weights=ctx.allow_pickle_weights
        )
    except SpecError as exc:
        raise _spec_error(exc.errors) from None
    cluster = ctx.cluster
    alive = [] if cluster is None else [n for n in cluster.nodes if n.alive]
    spec, errors = accelerator_check(
        spec,
        nodes=[(n.accelerator, n.total_gpus) for n in alive],
        admin=ctx.accelerator_types,
    )
    if cluster is not None and not errors:
        nodes = [(n.total_cpus, n.total_gpus, n.accelerator) for n in alive]
        note = f" ({ctx.cluster_note})" if ctx.cluster_note else ""
        errors += [FieldError(e.loc, e.message + note) for e in resource_errors(spec, nodes=nodes)]
    if ctx.ecosystem is not None:  # hub ids, report_to: what this server can reach
        errors += ecosystem_errors(spec, policy=ctx.ecosystem)
    if errors:
        raise _spec_error(errors)
    return spec


def _quota_errors(session: Session, team: str, resolved: dict[str, Any]) -> list[FieldError]:
    """A job bigger than its team's whole quota could never start."""
    row = session.get(Team, team)
    if row is None:
        return [FieldError("team", f"team {team!r} does not exist")]
    r = resolved["resources"]
    gpus = start_width(r) * r["gpus_per_worker"]  # an elastic job starts on min
    cpus = start_width(r) * r["cpus_per_worker"]
    out = []
    if row.max_gpus is not None and gpus > row.max_gpus:
        out.append(FieldError("resources", f"needs {gpus:g} GPUs; team quota is {row.max_gpus:g}"))
    if row.max_cpus is not None and cpus > row.max_cpus:
        out.append(FieldError("resources", f"needs {cpus:g} CPUs; team quota is {row.max_cpus:g}"))
    if row.max_running_jobs == 0:
        out.append(FieldError("team", f"team {team!r} may run no jobs (max_running_jobs 0)"))
    return out


def _check_priority(session: Session, *, principal: Principal, priority: str) -> None:
    """A member may not submit above its team's ``max_priority`` (admins may)."""
    team = session.get(Team, principal.team)
    if principal.is_admin or team is None:
        return
    if priority_rank(priority) < priority_rank(team.max_priority):
        raise Forbidden(
            f"priority: {priority!r} is above team {team.name!r}'s max_priority "
            f"{team.max_priority!r}; submit at {team.max_priority!r} or lower, or ask an admin "
            f"to raise it (PATCH /v1/teams/{team.name})"
        )


def _weights(ctx: SubmitContext) -> dict[str, float]:
    """Per accelerator type the weight of its GPU-hours in the team's budget."""
    return {k: v.weight for k, v in ctx.accelerator_types.items() if v.weight != 1.0}


def _team_checked(
    session: Session, *, principal: Principal, resolved: dict[str, Any]
) -> dict[str, Any]:
    """Priority cap, quota, ``init_from``: reads only. The spec with ``init_from`` resolved."""
    _check_priority(session, principal=principal, priority=resolved.get("priority", "normal"))
    errors = _quota_errors(session, principal.team, resolved)
    errors += notify_errors(session, team=principal.team, spec=resolved)
    if errors:
        raise _spec_error(errors)
    try:  # model.init_from names a checkpoint of one of the team's jobs: find its directory
        return resolve_init_from(session, team=principal.team, spec=resolved)
    except SpecError as exc:
        raise _spec_error(exc.errors) from None


def team_checks(
    session: Session,
    *,
    principal: Principal,
    resolved: dict[str, Any],
    weights: Mapping[str, float] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The team's checks of a submit (priority cap, quota, ``init_from``, budget): the spec to
    queue and, when a soft budget is spent, the note for its event. 403/422 as a submit.

    A team past its budget (``service.accounts.budgets``; GPU-hours weighted per accelerator
    type by ``weights``): ``hard`` -> 403 with the figure; ``soft`` -> the spec at ``low``
    priority and the note its ``submitted`` event carries."""
    resolved = _team_checked(session, principal=principal, resolved=resolved)
    team = principal.team
    state = budget_state(session, team=team, weights=weights)
    if state is None or not state.exceeded:
        return resolved, None
    figure = state.figure(team)
    if state.mode == "hard":
        raise Forbidden(
            f"{figure}; the budget is hard, so new jobs are refused until the next period. "
            f"Ask an admin to raise it (PATCH /v1/teams/{team} with a budget)",
            detail="budget_exceeded",
        )
    note = f"{figure}; the budget is soft: queued at low priority"
    return {**resolved, "priority": "low"}, note


def check_submission(
    db: Database,
    *,
    principal: Principal,
    raw: bytes,
    content_type: str | None,
    ctx: SubmitContext,
) -> Submission:
    """Every check a submit runs, in a read-only transaction: 4xx as a submit, no writes."""
    require_writer(principal)
    document = parse_document(raw, content_type)
    spec = validate_document(document, ctx)
    resolved, _ = db.read(
        lambda s: team_checks(
            s, principal=principal, resolved=spec.model_dump(mode="json"), weights=_weights(ctx)
        )
    )
    db.read(
        lambda s: job_inputs(
            s, team=principal.team, resolved=resolved, storage=ctx.storage, buckets=ctx.data_buckets
        )
    )
    return Submission(document=document, spec=spec, resolved=resolved)


def dry_run(
    db: Database,
    *,
    principal: Principal,
    raw: bytes,
    content_type: str | None,
    ctx: SubmitContext,
) -> DryRunRead:
    """``check_submission`` plus the plan: the resolved spec as it would be queued, and how it
    would run (``shunter.jobspec.plan``). Nothing is queued; the idempotency table is not read."""
    checked = check_submission(db, principal=principal, raw=raw, content_type=content_type, ctx=ctx)
    plan = plan_for(checked.spec, gpu_memory_bytes=ctx.gpu_memory_bytes, **plan_facts(checked.spec))
    return DryRunRead(spec=checked.resolved, plan=plan)


def _write(
    session: Session,
    *,
    principal: Principal,
    resolved: dict[str, Any],
    storage: str,
    key: str | None,
    digest: str,
    buckets: tuple[str, ...] = (),
    provenance: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
    weights: Mapping[str, float] | None = None,
) -> SubmitResult:
    if key is not None:
        hit = session.execute(
            select(IdempotencyKey).where(
                IdempotencyKey.team == principal.team, IdempotencyKey.key == key
            )
        ).scalar_one_or_none()
        if hit is not None:
            if hit.body_sha256 != digest:
                raise Unprocessable(
                    "Idempotency-Key: this key was already used with a different body",
                    detail="idempotency_key_reused",
                )
            job = session.get(Job, hit.job_id)
            assert job is not None
            return SubmitResult(job=job_read(job), created=False)
    resolved, budget_note = team_checks(
        session, principal=principal, resolved=resolved, weights=weights
    )
    submitted, record = provenance
    job = insert_job(
        session,
        principal=principal,
        resolved=resolved,
        storage=storage,
        submitted=submitted,
        record=record,
    )
    attach_inputs(session, job=job, storage=storage, buckets=buckets)
    if budget_note is not None:
        session.add(Event(job_id=job.id, type=EventType.BUDGET_EXCEEDED, message=budget_note))
    if key is not None:
        session.add(IdempotencyKey(team=principal.team, key=key, body_sha256=digest, job_id=job.id))
    session.flush()
    return SubmitResult(job=job_read(job), created=True)


def _names_objects(resolved: dict[str, Any]) -> bool:
    data, model = resolved["data"], resolved["model"]
    sources = [data["train"], data.get("eval") or {}]
    refs = [model.get("name_or_path"), model.get("tokenizer")]
    return any(s.get("dataset") or s.get("uri") for s in sources) or any(
        is_store_ref(r) for r in refs
    )


def job_inputs(
    session: Session,
    *,
    team: str,
    resolved: dict[str, Any],
    storage: str,
    buckets: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """The team objects and bucket files a resolved spec names, as the job's ``inputs``
    (``service.objects.store``); None when it names none; 422 naming each problem."""
    if not _names_objects(resolved):
        return None
    spec = JobSpec.model_validate(resolved)
    inputs, errors = resolve_inputs(session, team=team, spec=spec, root=storage, buckets=buckets)
    if errors:
        raise _spec_error(errors)
    return inputs


def attach_inputs(
    session: Session, *, job: Job, storage: str, buckets: tuple[str, ...] = ()
) -> None:
    """Resolve what an inserted job's spec names into its ``inputs`` and keep those objects
    for it (``object_refs``); 422 naming each problem (the caller's transaction rolls back,
    so nothing is written)."""
    job.inputs = job_inputs(
        session, team=job.team, resolved=job.spec, storage=storage, buckets=buckets
    )
    if job.inputs:
        record_refs(session, job_id=job.id, inputs=job.inputs)
        session.flush()


def insert_job(
    session: Session,
    *,
    principal: Principal,
    resolved: dict[str, Any],
    storage: str,
    job_id: str | None = None,
    submitted: dict[str, Any] | None = None,
    record: dict[str, Any] | None = None,
) -> Job:
    """Write a checked spec as a queued job and its ``submitted`` event (no commit).
    ``submitted``/``record``: the user's form and the reproduction record
    (``service.jobs.reproduce``)."""
    job_id = job_id or new_job_id()
    spec = {**resolved, "training": {**resolved["training"], "output_dir": f"{storage}/{job_id}"}}
    res = spec["resources"]
    priority = spec.get("priority", "normal")
    job = Job(
        id=job_id,
        team=principal.team,
        name=spec["name"],
        status="queued",
        priority=priority,
        spec=spec,
        created_by=principal.name,
        num_workers=start_width(res),  # elastic: min until an attempt runs wider
        cpus_per_worker=res["cpus_per_worker"],
        gpus_per_worker=res["gpus_per_worker"],
        pending_reason="waiting for the scheduler",
        queue_position=first_queue_position(session, job_id=job_id, priority=priority),
        submitted_spec=submitted,
        record=record,
    )
    session.add(job)
    session.flush()
    session.add(
        Event(
            job_id=job_id,
            to_status="queued",
            type=EventType.SUBMITTED,
            message=f"submitted by {principal.name}",
        )
    )
    session.flush()
    return job


def submit_job(
    db: Database,
    *,
    principal: Principal,
    raw: bytes,
    content_type: str | None,
    idempotency_key: str | None,
    ctx: SubmitContext,
) -> SubmitResult:
    """Validate completely, then store the job in one transaction. Nothing is written on 4xx."""
    require_writer(principal)
    if idempotency_key is not None:
        idempotency_key = idempotency_key.strip()
        if not idempotency_key or len(idempotency_key) > _IDEMPOTENCY_KEY_MAX:
            raise BadRequest("Idempotency-Key: must be 1-255 characters", detail="bad_header")
    document = parse_document(raw, content_type)
    spec = validate_document(document, ctx)
    resolved = spec.model_dump(mode="json")
    provenance = (submitted_form(document), submit_record(spec))
    digest = body_sha256(document)
    for attempt in range(3):
        try:
            return db.write(
                lambda s: _write(
                    s,
                    principal=principal,
                    resolved=resolved,
                    storage=ctx.storage,
                    key=idempotency_key,
                    digest=digest,
                    buckets=ctx.data_buckets,
                    provenance=provenance,
                    weights=_weights(ctx),
                )
            )
        except IntegrityError:
            # Lost the (team, key) race: the re-run replays the winner's job.
            if idempotency_key is None or attempt == 2:
                raise
    raise AssertionError("unreachable")
