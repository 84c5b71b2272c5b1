"""``GET /v1/jobspec.schema.json``: the JobSpec's JSON Schema, for editors and generators.

No token needed, like ``/openapi.json`` and ``/docs``: the schema is the public contract and
holds nothing of any team. Built once (the spec cannot change while the process runs).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from shunter.jobspec.schema import jobspec_json_schema

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobspec"])


@cache
def _schema() -> dict[str, Any]:
    return jobspec_json_schema()


@router.get("/jobspec.schema.json")
def jobspec_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a JobSpec; also ``docs/jobspec.schema.json``."""
    return _schema()
