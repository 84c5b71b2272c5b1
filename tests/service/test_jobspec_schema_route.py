"""``GET /v1/jobspec.schema.json``: public, and the same schema as ``docs/jobspec.schema.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_schema_is_served_without_a_token(client: Any) -> None:
    response = client.get("/v1/jobspec.schema.json")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    committed = json.loads((DOCS / "jobspec.schema.json").read_text(encoding="utf-8"))
    assert response.json() == committed
    assert response.json()["$id"] == "/v1/jobspec.schema.json"
