"""``shunter clone JOB [--set a.b=v ...] [--from-checkpoint N]`` and ``shunter diff A B``.

``clone`` sends the overrides to ``POST /v1/jobs/{id}/clone``: the server starts from the job's
submitted spec (``GET /v1/jobs/{id}/spec``) and checks the result like any submit, so a bad
``--set`` is the server's 422 naming the field (exit 2). ``diff`` compares two jobs' submitted
specs and records (``GET /v1/jobs/{id}/record``) field by field, as dotted paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from shunter.cli import common
from shunter.cli.overrides import parse_value

__all__ = ["clone", "diff", "differences"]

_ABSENT = "-"
_CHECKPOINT = re.compile(r"^(?:step-)?(\d+)(?:@\d+)?$")  # N, step-N, or a listed id step-N@A


def _flat(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Leaves of a document as (dotted path, value); lists are leaves."""
    if isinstance(node, dict) and node:
        for key in sorted(node):
            yield from _flat(node[key], f"{prefix}{key}.")
    else:
        yield prefix[:-1], node


def differences(a: Any, b: Any) -> dict[str, tuple[Any, Any]]:
    """``{dotted path: (a's value, b's value)}`` where they differ; ``-`` where absent."""
    left, right = dict(_flat(a or {})), dict(_flat(b or {}))
    return {
        key: (left.get(key, _ABSENT), right.get(key, _ABSENT))
        for key in sorted(left.keys() | right.keys())
        if left.get(key, _ABSENT) != right.get(key, _ABSENT)
    }


def _sets(items: list[str]) -> dict[str, Any]:
    overrides = {}
    for item in items:
        path, sep, raw = item.partition("=")
        path = path.strip()
        if not sep or not path or not all(path.split(".")):
            raise ValueError(f"--set {item!r}: expected dotted.path=value, e.g. training.seed=1")
        overrides[path] = parse_value(raw)
    return overrides


def _checkpoint(text: str | None) -> int | str | None:
    if text is None or text in ("latest", "best"):
        return text
    named = _CHECKPOINT.match(text)
    if named is None:
        raise ValueError(f"--from-checkpoint {text!r}: a step N, step-N@A, latest or best")
    return int(named[1])


def clone(
    opts: common.Opts,
    job_id: common.JobArg,
    set_: common.SetOpt = None,
    from_checkpoint: Annotated[
        str | None,
        typer.Option(
            "--from-checkpoint",
            help="Start from this verified checkpoint of JOB (a step N, its id step-N@A, "
            "latest or best): its weights, fresh optimizer; add --set model.init_from.resume=true "
            "to continue that run exactly.",
        ),
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
) -> None:
    """Submit a copy of a job: its submitted spec with --set changes (checked like a submit)."""
    try:
        overrides, checkpoint = _sets(set_ or []), _checkpoint(from_checkpoint)
    except ValueError as e:
        common.fail(opts, common.EXIT["invalid"], str(e))
    with common.api(opts) as client:
        job = client.clone(
            job_id,
            overrides=overrides,
            from_checkpoint=checkpoint,
            idempotency_key=idempotency_key,
        )
    common.reply(opts, job, lambda j: f"submitted [bold]{j.id}[/]")


def _show(value: Any) -> str:
    return escape(str(value))


def diff(
    opts: common.Opts,
    job_a: Annotated[str, typer.Argument(help="A job id.")],
    job_b: Annotated[str, typer.Argument(help="The job to compare it with.")],
) -> None:
    """Print what differs between two jobs: their submitted specs and their records (code and
    package versions, data and model fingerprints, seed)."""
    with common.api(opts) as client:
        spec = differences(client.spec(job_a), client.spec(job_b))
        record = differences(client.record(job_a), client.record(job_b))
    if opts.json:
        common.print_json(
            {
                part: {k: {"a": a, "b": b} for k, (a, b) in found.items()}
                for part, found in (("spec", spec), ("record", record))
            }
        )
        return
    if not spec and not record:
        common.out.print(f"{job_a} and {job_b}: same spec, same record", soft_wrap=True)
        return
    for part, found in (("spec", spec), ("record", record)):
        if not found:
            common.out.print(f"{part}: the same")
            continue
        table = Table(title=part, title_justify="left")
        for col in ("FIELD", job_a, job_b):
            table.add_column(col)
        for key, (a, b) in found.items():
            table.add_row(key, _show(a), _show(b))
        common.out.print(table)
