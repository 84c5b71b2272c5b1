"""Per-team data roots: an admin adds a root for one team; only that team's specs may read it,
and SHUNTER_DATA_ROOTS still serves every team. (On main 187a972 every team shared every
data root.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sec_helpers import bearer, tiny_spec


def test_a_team_root_is_readable_by_that_team_only(
    client: Any, admin_token: str, make_token: Any, tmp_path: Path
) -> None:
    alpha = make_token("alpha")
    beta = make_token("beta")
    private = tmp_path / "alpha-data"
    private.mkdir()
    (private / "secret.tsv").write_text("sentence\tlabel\nhush\t1\n")
    spec = tiny_spec(data={"train": {"path": str(private / "secret.tsv"), "format": "csv",
                                     "delimiter": "\t"}})  # fmt: skip
    assert client.post("/v1/jobs", json=spec, headers=bearer(alpha)).status_code == 422
    r = client.post(
        "/v1/teams/alpha/data-roots", json={"path": str(private)}, headers=bearer(admin_token)
    )
    assert r.status_code == 201 and r.json()["roots"] == [str(private)]
    assert client.post("/v1/jobs", json=spec, headers=bearer(alpha)).status_code == 201
    denied = client.post("/v1/jobs", json=spec, headers=bearer(beta))
    assert denied.status_code == 422
    assert str(private) not in denied.json()["detail"][0]["msg"].replace(
        str(private / "secret.tsv"), ""
    )
    # The global roots still work for everyone; only admins manage team roots.
    assert client.post("/v1/jobs", json=tiny_spec(), headers=bearer(beta)).status_code == 201
    assert (
        client.post(
            "/v1/teams/beta/data-roots", json={"path": str(private)}, headers=bearer(beta)
        ).status_code
        == 403
    )
    assert client.get("/v1/teams/alpha/data-roots", headers=bearer(beta)).status_code == 404
    listed = client.get("/v1/teams/alpha/data-roots", headers=bearer(alpha)).json()
    assert listed == {"team": "alpha", "roots": [str(private)]}
    bad = client.post(
        "/v1/teams/alpha/data-roots", json={"path": "relative"}, headers=bearer(admin_token)
    )
    assert bad.status_code == 422
