"""The JobSpec's JSON Schema as published: ``GET /v1/jobspec.schema.json`` and the committed
``docs/jobspec.schema.json`` (written by ``scripts/gen_jobspec_docs.py``).

One function so the route, the file and the reference page cannot drift apart. Validation
mode: what a user may write (a data source may be a bare path), not what the service stores.
"""

from __future__ import annotations

from typing import Any

from shunter.jobspec.spec import JobSpec

__all__ = ["SCHEMA_DIALECT", "SCHEMA_ID", "jobspec_json_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# The API path it is served at: a stable name for editors and for ``$ref`` from elsewhere.
SCHEMA_ID = "/v1/jobspec.schema.json"


def jobspec_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a JobSpec, with its dialect and id first."""
    schema = JobSpec.model_json_schema(mode="validation")
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, **schema}
