"""A diverged loss (NaN, +/-inf) travels from the worker's client to the API and back out as
strict JSON: the worker sends the strings ``"NaN"``/``"Infinity"``/``"-Infinity"``, the API
counts those points as skipped (not stored) and never fails on them, and checkpoint metrics
keep them as those strings. Before, httpx refused the body ("Out of range float values are
not JSON compliant") and the job failed as ``internal``."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
from svc_helpers import bearer, claim, submit

from service.health.divergence import HEALTH_EVENTS
from worker.internal_api import InternalApi, json_safe


def test_json_safe_names_every_non_finite_value() -> None:
    body = {"a": [math.nan, math.inf, -math.inf, 1.5], "b": {"c": math.nan}, "d": 3}
    out = json.dumps(json_safe(body), allow_nan=False)  # strict JSON: would raise otherwise
    assert json.loads(out) == {
        "a": ["NaN", "Infinity", "-Infinity", 1.5],
        "b": {"c": "NaN"},
        "d": 3,
    }


def test_non_finite_metrics_and_checkpoint_metrics_reach_the_api(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)

    def via_app(request: httpx.Request) -> httpx.Response:  # the worker's bytes, unchanged
        r = client.request(
            request.method,
            request.url.raw_path.decode(),
            content=request.content,
            headers=dict(request.headers),
        )
        return httpx.Response(r.status_code, content=r.content, headers=r.headers)

    api = InternalApi(
        api_url="http://testserver",
        token=t,
        job_id=job_id,
        attempt=n,
        transport=httpx.MockTransport(via_app),
    )
    reply = api.request(
        "POST",
        "metrics",
        {
            "points": [
                {"step": 1, "name": "loss", "value": 2.5},
                {"step": 2, "name": "loss", "value": math.nan},
                {"step": 2, "name": "grad_norm", "value": math.inf},
                {"step": 3, "name": "loss", "value": -math.inf},
            ]
        },
    )
    assert reply == {"accepted": 1, "skipped_non_finite": 3}
    out = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    ck = api.request("GET", "spec")["output_dir"] + "/checkpoint-2"
    api.checkpoint(step=2, uri=ck, nbytes=1, metrics={"loss": math.nan}, verified=True)
    page = client.get(f"/v1/jobs/{job_id}/checkpoints", headers=bearer(admin_token))
    assert page.status_code == 200  # strict JSON out: no NaN in the reply
    assert page.json()["data"][0]["metrics"] == {"loss": "NaN"}
    assert out["latest_metrics"]["loss"] == 2.5


def test_divergence_metrics_become_events_once_and_a_prometheus_counter(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    url = f"/v1/internal/jobs/{job_id}/attempts/{n}/metrics"
    skip = {
        "points": [
            {"step": 6, "name": "health_skipped_steps", "value": 1},
            {"step": 6, "name": "health_skipped_loss", "value": 4.2e8},
            {"step": 6, "name": "health_skipped_grad_norm", "value": "NaN"},
            {"step": 7, "name": "health_rollbacks", "value": 1},
            {"step": 7, "name": "health_rollback_to_step", "value": 4},
            {"step": 7, "name": "health_seed", "value": 43},
        ]
    }
    for _ in range(2):  # a retried batch writes no second event
        r = client.post(url, json=skip, headers=bearer(t))
        assert r.status_code == 200, r.text
    events = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(admin_token)).json()["data"]
    health = [(e["type"], e["message"]) for e in events if e["type"] in HEALTH_EVENTS.values()]
    assert health == [
        (
            "step_skipped",
            "step 6 skipped (optimizer step not taken): loss 4.2e+08, grad norm nan; "
            "1 skipped so far",
        ),
        (
            "rolled_back",
            "rollback 1 at step 7: back to the checkpoint of step 4, the data since skipped, "
            "seed now 43",
        ),
    ]
    # The loss curve's rollback markers: the metric series the API serves.
    series = client.get(
        f"/v1/jobs/{job_id}/metrics",
        params={"name": "health_rollbacks"},
        headers=bearer(admin_token),
    ).json()["data"]
    assert [(p["step"], p["name"], p["value"]) for p in series] == [(7, "health_rollbacks", 1.0)]
    text = client.get("/metrics").text
    assert 'shunter_training_health_events_total{type="step_skipped"} 1.0' in text
    assert 'shunter_training_health_events_total{type="rolled_back"} 1.0' in text
