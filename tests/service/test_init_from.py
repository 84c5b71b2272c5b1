"""``model.init_from`` at submit: the checkpoint directory is resolved (latest, best by the
source job's metric, a step), within the team only, and every miss is a 422 naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from svc_helpers import bearer, submit, tiny_spec

from service.db.tables import Checkpoint


def _with_checkpoints(client: Any, db: Any, token: str) -> str:
    source = submit(client, token, tiny_spec("source"))["id"]
    losses = {2: 0.9, 4: 0.5, 6: 0.7}  # step 4 is the best eval_loss, step 6 the latest
    db.write(
        lambda s: s.add_all(
            [
                Checkpoint(
                    job_id=source,
                    attempt=1,
                    step=step,
                    uri=f"/ckpt/{step}",
                    bytes=1,
                    metrics={"loss": 1.0, "eval_loss": value},
                    verified=True,
                )
                for step, value in losses.items()
            ]
            + [
                Checkpoint(
                    job_id=source,
                    attempt=1,
                    step=8,
                    uri="/ckpt/8",
                    bytes=1,
                    metrics={},
                    verified=False,
                )
            ]
        )
    )
    return str(source)


def _init(source: str, **over: Any) -> dict[str, Any]:
    spec = tiny_spec("child")
    spec["model"]["init_from"] = {"job": source, **over}
    return spec


def test_latest_best_and_step_resolve_to_directories(
    client: Any, db: Any, make_token: Callable[..., str]
) -> None:
    token = make_token("alpha")
    source = _with_checkpoints(client, db, token)
    for which, uri in (("latest", "/ckpt/6"), ("best", "/ckpt/4"), (2, "/ckpt/2")):
        job = submit(client, token, _init(source, checkpoint=which))
        init = job["spec"]["model"]["init_from"]
        assert init == {"job": source, "checkpoint": which, "resume": False, "path": uri}


def test_misses_are_422s_naming_the_field(
    client: Any, db: Any, make_token: Callable[..., str]
) -> None:
    token = make_token("alpha")
    source = _with_checkpoints(client, db, token)
    cases = [
        (_init(source, checkpoint=8), "model.init_from.checkpoint", "no checkpoint at step 8"),
        (_init(source, path="/etc"), "model.init_from.path", "set by the service"),
        (_init("job-0000000000000000000000000a"), "model.init_from.job", "not found"),
    ]
    other = make_token("beta")
    r = client.post("/v1/jobs", json=_init(source), headers=bearer(other))
    assert r.status_code == 422 and "not found in team beta" in r.text, r.text
    for spec, loc, phrase in cases:
        r = client.post("/v1/jobs", json=spec, headers=bearer(token))
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == loc and phrase in r.text, r.text
    # A source without any metric for "best" says how to proceed.
    bare = submit(client, token, tiny_spec("bare"))["id"]
    db.write(
        lambda s: s.add(
            Checkpoint(
                job_id=bare,
                attempt=1,
                step=1,
                uri="/c",
                bytes=1,
                metrics={"loss": 1.0},
                verified=True,
            )
        )
    )
    r = client.post("/v1/jobs", json=_init(bare, checkpoint="best"), headers=bearer(token))
    assert r.status_code == 422 and "use latest or a step number" in r.text, r.text
