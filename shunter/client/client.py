"""``Client``: a typed, synchronous Python client for Shunter's public API v1.

One method per public endpoint (DESIGN.md, "Public API v1"). Lists come back as iterators
that follow ``next_cursor`` lazily, so ``for job in client.list(): ...`` walks every page and
``itertools.islice`` stops early without fetching the rest. Errors are raised as the typed
exceptions of :mod:`shunter.client.errors`; nothing returns an error value.

Example::

    with Client() as c:                      # URL and token from the environment
        job = c.submit("examples/sst2.yaml")
        for ev in c.stream_metrics(job.id):  # live points until the job ends
            ...
        final = c.wait(job.id, timeout=600)
"""

from __future__ import annotations

import builtins
import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx
import yaml
from httpx_sse import connect_sse
from pydantic import BaseModel

from shunter.client.config import resolve_token, resolve_url
from shunter.client.download import repoint_adapter, unpack_model
from shunter.client.errors import ConnectionFailed, ShunterError, raise_for_response
from shunter.client.models import (
    Checkpoint,
    Cluster,
    DryRun,
    Event,
    IssuedToken,
    Job,
    MetricPoint,
    NodeCordon,
    Page,
    QueueEntry,
    StreamEvent,
    Sweep,
    Team,
    TeamUsage,
    TokenInfo,
    WebhookDelivery,
    WebhookEndpoint,
    WhoAmI,
)
from shunter.client.objects import StoredObject, upload_parts
from shunter.model_names import model_ref

__all__ = ["Client", "SpecInput", "load_spec"]

M = TypeVar("M", bound=BaseModel)

# A spec as a user holds it: a mapping, a path to a YAML/JSON file, or a pydantic JobSpec.
SpecInput = Mapping[str, Any] | str | Path | BaseModel


def load_spec(spec: SpecInput) -> dict[str, Any]:
    """Turn any :data:`SpecInput` into the JSON-ready dict that is POSTed.

    A ``str`` is always a file path (YAML or JSON; JSON is YAML). A pydantic model is dumped
    with only the fields that were set, so the server fills its own defaults.
    """
    if isinstance(spec, BaseModel):
        return spec.model_dump(mode="json", exclude_unset=True)
    if isinstance(spec, str | Path):
        data = yaml.safe_load(Path(spec).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ShunterError(
                f"{spec}: a spec file must hold a mapping, not {type(data).__name__}"
            )
        return data
    return dict(spec)


class Client:
    """A connection to one Shunter server with one token.

    ``url``/``token`` default as described in :mod:`shunter.client.config`. ``timeout`` is the
    per-request timeout in seconds (streams use it only to connect). ``transport`` lets tests
    plug in ``httpx.MockTransport`` or an ASGI transport.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = resolve_url(url)
        self.token = resolve_token(token, url=self.url)
        headers = {"Accept": "application/json", "User-Agent": "shunter-client/0.1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        # No redirects: the token goes to the configured URL and nowhere else.
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    # -- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise ConnectionFailed(f"cannot reach {self.url}: {e}") from e
        raise_for_response(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        if not response.content:
            return None
        return response.json()

    def _pages(self, path: str, model: type[M], params: dict[str, Any]) -> Iterator[M]:
        """Yield every item of a cursor-paginated list, fetching pages as they are needed."""
        params = {k: v for k, v in params.items() if v is not None}
        while True:
            page = self._page(path, model, params)
            yield from page.data
            if not page.next_cursor:
                return
            params = {**params, "cursor": page.next_cursor}

    def _page(self, path: str, model: type[M], params: dict[str, Any]) -> Page[M]:
        body = self._json("GET", path, params=params)
        if isinstance(body, list):  # an endpoint that is not paginated (yet)
            return Page[model](data=body)  # type: ignore[valid-type]
        return Page[model].model_validate(body)  # type: ignore[valid-type]

    # -- jobs -------------------------------------------------------------------------------

    @overload
    def submit(
        self,
        spec: SpecInput,
        *,
        idempotency_key: str | None = None,
        dry_run: Literal[False] = False,
    ) -> Job: ...

    @overload
    def submit(
        self, spec: SpecInput, *, idempotency_key: str | None = None, dry_run: Literal[True]
    ) -> DryRun: ...

    def submit(
        self, spec: SpecInput, *, idempotency_key: str | None = None, dry_run: bool = False
    ) -> Job | DryRun:
        """POST a JobSpec; returns the queued job (``dry_run``: the resolved spec and plan).

        A file path is sent as it is (``application/yaml``, or ``application/json`` for a
        ``.json`` file), so the server's strict parser is the one that reads it; a mapping or
        model is sent as JSON. Raises ValidationError (422) for an invalid spec and
        BadRequest (400) for a document the API refuses to read (NaN, NUL bytes, ...).
        ``dry_run=True`` runs the same checks and queues nothing.
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        if isinstance(spec, str | Path):
            path = Path(spec)
            kind = "application/json" if path.suffix.lower() == ".json" else "application/yaml"
            content = path.read_bytes()
        else:
            # allow_nan: a NaN is the server's to refuse (400, with its message), not a crash
            # in the client's encoder.
            kind, content = "application/json", json.dumps(load_spec(spec)).encode()
        headers["Content-Type"] = kind
        if dry_run:
            body = self._json(
                "POST", "/v1/jobs", content=content, headers=headers, params={"dry_run": "true"}
            )
            return DryRun.model_validate(body)
        return Job.model_validate(self._json("POST", "/v1/jobs", content=content, headers=headers))

    def get(self, job_id: str) -> Job:
        return Job.model_validate(self._json("GET", f"/v1/jobs/{job_id}"))

    def list(
        self, *, status: str | None = None, name: str | None = None, limit: int | None = None
    ) -> Iterator[Job]:
        """The team's jobs (newest first, as the server orders them); ``limit`` is page size."""
        return self._pages("/v1/jobs", Job, {"status": status, "name": name, "limit": limit})

    def list_page(
        self,
        *,
        status: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Job]:
        """One page of :meth:`list`, for callers that keep the cursor themselves."""
        params = {"status": status, "name": name, "limit": limit, "cursor": cursor}
        return self._page("/v1/jobs", Job, {k: v for k, v in params.items() if v is not None})

    def cancel(self, job_id: str) -> Job:
        """Cancel; idempotent on a cancelled job. Conflict (409) on a succeeded/failed job."""
        return Job.model_validate(self._json("POST", f"/v1/jobs/{job_id}/cancel"))

    def delete(self, job_id: str) -> None:
        """Delete a finished job with its metrics, events, checkpoints and storage (audited).
        Conflict (409) while it is not finished: cancel it first."""
        self._request("DELETE", f"/v1/jobs/{job_id}")

    def gc(self, older_than: str, *, dry_run: bool = False) -> dict[str, Any]:
        """Admin: delete finished jobs older than ``older_than`` (``30d``); ``dry_run`` lists."""
        body = {"older_than": older_than, "dry_run": dry_run}
        result: dict[str, Any] = self._json("POST", "/v1/admin/gc", json=body)
        return result

    def nodes(self) -> builtins.list[NodeCordon]:
        """Admin: nodes the straggler watch flagged, and their cordons."""
        rows = self._json("GET", "/v1/admin/nodes")
        return [NodeCordon.model_validate(r) for r in rows]

    def uncordon(self, node_id: str) -> None:
        """Admin: end a node's cordon now and clear its flags."""
        self._request("DELETE", f"/v1/admin/nodes/{node_id}/cordon")

    def resume(self, job_id: str) -> Job:
        """Start a failed, cancelled or paused job again from its newest verified checkpoint."""
        return Job.model_validate(self._json("POST", f"/v1/jobs/{job_id}/resume"))

    def spec(self, job_id: str) -> dict[str, Any]:
        """The spec the job was submitted with, every default written out: submitting it
        again (:meth:`submit`) makes the same job."""
        spec: dict[str, Any] = self._json("GET", f"/v1/jobs/{job_id}/spec")
        return spec

    def record(self, job_id: str) -> dict[str, Any] | None:
        """What the job ran with: code and package versions, data and model fingerprints,
        seed (None for a job stored before records were kept)."""
        record: dict[str, Any] | None = self._json("GET", f"/v1/jobs/{job_id}/record")["record"]
        return record

    def clone(
        self,
        job_id: str,
        *,
        overrides: dict[str, Any] | None = None,
        from_checkpoint: int | str | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """A new job from ``job_id``'s submitted spec with ``overrides`` (``{"dotted.field":
        value}``) and, with ``from_checkpoint`` (a step, ``latest`` or ``best``), starting from
        that checkpoint's weights. Validated like a submit (422: ``ValidationError``)."""
        body = {"overrides": overrides or {}, "from_checkpoint": from_checkpoint}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return Job.model_validate(
            self._json("POST", f"/v1/jobs/{job_id}/clone", json=body, headers=headers)
        )

    def pause(self, job_id: str) -> Job:
        """Checkpoint at the next step and hold the job (``paused``) until ``resume``. A queued
        job is paused at once; a running one stays ``running`` until it has checkpointed."""
        return Job.model_validate(self._json("POST", f"/v1/jobs/{job_id}/pause"))

    def events(self, job_id: str) -> Iterator[Event]:
        """Lifecycle events, oldest first."""
        return self._pages(f"/v1/jobs/{job_id}/events", Event, {})

    def metrics(
        self,
        job_id: str,
        *,
        name: str | None = None,
        after: str | int | None = None,
        limit: int | None = None,
    ) -> Iterator[MetricPoint]:
        """Metric points in step order; ``name`` filters, ``after`` starts past a cursor."""
        params = {"name": name, "after": after, "limit": limit}
        return self._pages(f"/v1/jobs/{job_id}/metrics", MetricPoint, params)

    def download_model(
        self,
        job_id: str,
        dest: str | Path,
        *,
        checkpoint: str | int = "final",
        wait_s: float = 3600.0,
    ) -> Path:
        """Download a model of the job and unpack it under ``dest``; returns the model folder
        (``config.json``, weights, tokenizer; PEFT files for LoRA). ``checkpoint``: ``final``,
        ``best``, or a step number (that verified checkpoint; its first download waits while
        the server consolidates it, up to ``wait_s`` seconds for the first byte).
        ``job_id`` may be a fine-tuned model name instead (``ft:...``, ``ft:...:ckpt-step-N``
        as the OpenAI-compatible API gives them): it names the job and the checkpoint."""
        if (ref := model_ref(job_id)) is not None:
            job_id, checkpoint = ref
        path = f"/v1/jobs/{job_id}/checkpoints/{checkpoint}/download"
        timeout = httpx.Timeout(self._http.timeout.connect, read=wait_s)
        try:
            with self._http.stream("GET", path, timeout=timeout) as response:
                raise_for_response_stream(response)
                tops = unpack_model(response.iter_bytes(), Path(dest))
        except httpx.TransportError as e:
            raise ConnectionFailed(f"cannot reach {self.url}: {e}") from e
        if len(tops) != 1:
            raise ShunterError(f"the download held {tops}, not one model folder")
        repoint_adapter(Path(dest) / tops[0])
        return Path(dest) / tops[0]

    def checkpoints(self, job_id: str) -> builtins.list[Checkpoint]:
        return list(self._pages(f"/v1/jobs/{job_id}/checkpoints", Checkpoint, {}))

    def logs(self, job_id: str, *, tail: int | None = None) -> str:
        """The driver's and workers' output of the current attempt (the last ``tail`` bytes
        when given; else the first page: use ``logs_page`` to read on by offset)."""
        params = {"tail": tail} if tail is not None else {}
        response = self._request("GET", f"/v1/jobs/{job_id}/logs", params=params)
        if response.headers.get("content-type", "").startswith("application/json"):
            body = response.json()
            if isinstance(body, dict):
                return str(body.get("text") or body.get("logs") or "")
            return str(body)
        return response.text

    def stacks(self, job_id: str, *, attempt: int) -> str:
        """Every rank's stacks, dumped when the service found this attempt hung (404 else)."""
        params = {"attempt": attempt}
        return self._request("GET", f"/v1/jobs/{job_id}/stacks", params=params).text

    def logs_page(
        self,
        job_id: str,
        *,
        attempt: int | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """One page of an attempt's output by byte range: ``text``, ``next_offset``, ``size``,
        ``truncated`` (the server clamps ``limit`` to its max page)."""
        params: dict[str, Any] = {"offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        if limit is not None:
            params["limit"] = limit
        body: dict[str, Any] = self._request("GET", f"/v1/jobs/{job_id}/logs", params=params).json()
        return body

    def follow_logs(
        self, job_id: str, *, attempt: int | None = None, offset: int = 0
    ) -> Iterator[StreamEvent]:
        """Server-Sent Events of the job's output from ``offset``: ``log`` (``data.text``),
        ``attempt`` (a new attempt started), then ``end`` once the job is terminal."""
        params: dict[str, Any] = {"follow": "true", "offset": offset}
        if attempt is not None:
            params["attempt"] = attempt
        timeout = httpx.Timeout(self._http.timeout.connect, read=60.0)
        try:
            with connect_sse(
                self._http, "GET", f"/v1/jobs/{job_id}/logs", params=params, timeout=timeout
            ) as source:
                raise_for_response_stream(source.response)
                for sse in source.iter_sse():
                    event = StreamEvent(event=sse.event, data=json.loads(sse.data or "null"))
                    yield event
                    if event.event == "end":
                        return
        except httpx.TransportError as e:
            raise ConnectionFailed(f"stream from {self.url} broke: {e}") from e

    def stream_metrics(self, job_id: str, *, after: int | None = None) -> Iterator[StreamEvent]:
        """Server-Sent Events of new metric points and status changes, until ``end``.

        The iterator ends after the ``end`` event (the job reached a terminal state) or when
        the server closes the stream. The server first replays the points after ``after`` (a
        point id, as in ``MetricPoint.id``; all of them by default), then sends new ones.
        """
        # The server sends a keepalive every 15 s; a silent minute means the stream is dead.
        timeout = httpx.Timeout(self._http.timeout.connect, read=60.0)
        try:
            with connect_sse(
                self._http,
                "GET",
                f"/v1/jobs/{job_id}/metrics/stream",
                params={"after": after} if after is not None else None,
                timeout=timeout,
            ) as source:
                raise_for_response_stream(source.response)
                for sse in source.iter_sse():
                    event = _stream_event(sse.event, sse.data)
                    yield event
                    if event.event == "end":
                        return
        except httpx.TransportError as e:
            raise ConnectionFailed(f"stream from {self.url} broke: {e}") from e

    def wait(self, job_id: str, *, timeout: float | None = None, poll: float = 2.0) -> Job:
        """Poll until the job is terminal; return it. TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job.terminal:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} still {job.status} after {timeout}s")
            sleep = poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
            time.sleep(sleep)

    # -- sweeps -----------------------------------------------------------------------------

    def submit_sweep(self, sweep: SpecInput) -> Sweep:
        """POST a sweep (``base``, ``space``, ``objective``, ``direction``, ``max_trials``, ...;
        docs/sweeps.md). A file path is read as YAML/JSON. 422 names the field, e.g.
        ``space.resources.num_workers`` when a corner of the space gives an invalid spec."""
        body = json.dumps(load_spec(sweep)).encode()
        headers = {"Content-Type": "application/json"}
        return Sweep.model_validate(self._json("POST", "/v1/sweeps", content=body, headers=headers))

    def sweep(self, sweep_id: str) -> Sweep:
        """The sweep with its trials (params, status, objective, best step) and best trial."""
        return Sweep.model_validate(self._json("GET", f"/v1/sweeps/{sweep_id}"))

    def sweeps(self) -> builtins.list[Sweep]:
        return list(self._pages("/v1/sweeps", Sweep, {}))

    def cancel_sweep(self, sweep_id: str) -> Sweep:
        """Stop sampling and cancel every unfinished trial."""
        return Sweep.model_validate(self._json("POST", f"/v1/sweeps/{sweep_id}/cancel"))

    def wait_sweep(
        self, sweep_id: str, *, timeout: float | None = None, poll: float = 2.0
    ) -> Sweep:
        """Poll until the sweep ends; return it. TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sweep = self.sweep(sweep_id)
            if sweep.terminal:
                return sweep
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"sweep {sweep_id} still {sweep.status} after {timeout}s")
            time.sleep(
                poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
            )

    # -- cluster and queue ------------------------------------------------------------------

    def queue(self) -> builtins.list[QueueEntry]:
        """Queued jobs in the order they will be considered, with position and reason."""
        return list(self._pages("/v1/queue", QueueEntry, {}))

    def cluster(self) -> Cluster:
        return Cluster.model_validate(self._json("GET", "/v1/cluster"))

    def whoami(self) -> WhoAmI:
        return WhoAmI.model_validate(self._json("GET", "/v1/whoami"))

    def healthz(self) -> bool:
        self._request("GET", "/healthz")
        return True

    # -- admin ------------------------------------------------------------------------------

    def create_team(
        self, name: str, *, quota: Mapping[str, Any] | None = None, weight: float | None = None
    ) -> Team:
        body: dict[str, Any] = {"name": name}
        if quota is not None:
            body["quota"] = dict(quota)
        if weight is not None:
            body["weight"] = weight
        return Team.model_validate(self._json("POST", "/v1/teams", json=body))

    def teams(self) -> builtins.list[Team]:
        return list(self._pages("/v1/teams", Team, {}))

    def patch_team(
        self,
        name: str,
        *,
        weight: float | None = None,
        quota: Mapping[str, Any] | None = None,
        max_priority: str | None = None,
        budget: Mapping[str, Any] | None = None,
        clear_budget: bool = False,
    ) -> Team:
        """Change a team (admin). In ``quota``, a key given as None means unlimited.
        ``budget``: ``{gpu_hours?, cpu_hours?, period, starts?, mode}``; ``clear_budget``
        removes the team's budget."""
        body: dict[str, Any] = {}
        if budget is not None or clear_budget:
            body["budget"] = None if clear_budget else dict(budget or {})
        if weight is not None:
            body["weight"] = weight
        if quota is not None:
            body["quota"] = dict(quota)
        if max_priority is not None:
            body["max_priority"] = max_priority
        return Team.model_validate(self._json("PATCH", f"/v1/teams/{name}", json=body))

    def team_usage(self, name: str, *, since: str | None = None) -> TeamUsage:
        """GPU- and CPU-seconds the team's attempts held since ``since`` (ISO 8601)."""
        params = {"since": since} if since else None
        return TeamUsage.model_validate(self._json("GET", f"/v1/teams/{name}/usage", params=params))

    def create_token(self, *, team: str, role: str, name: str) -> IssuedToken:
        """Issue a token; its plaintext is in ``.token`` and is never shown again."""
        body = {"team": team, "role": role, "name": name}
        return IssuedToken.model_validate(self._json("POST", "/v1/tokens", json=body))

    def tokens(self) -> builtins.list[TokenInfo]:
        return list(self._pages("/v1/tokens", TokenInfo, {}))

    def revoke_token(self, token_id: str | int) -> None:
        self._request("DELETE", f"/v1/tokens/{token_id}")

    # -- webhooks ---------------------------------------------------------------------------

    def create_webhook(
        self,
        url: str,
        *,
        events: Sequence[str] | None = None,
        description: str = "",
        team: str | None = None,
    ) -> WebhookEndpoint:
        """Register a receiver; its ``whsec_`` secret is in ``.secret``, shown only now."""
        body: dict[str, Any] = {"url": url, "description": description}
        if events is not None:
            body["events"] = list(events)
        if team is not None:
            body["team"] = team
        return WebhookEndpoint.model_validate(
            self._json("POST", "/v1/webhooks/endpoints", json=body)
        )

    def webhooks(self, *, team: str | None = None) -> builtins.list[WebhookEndpoint]:
        params = {"team": team} if team else {}
        return list(self._pages("/v1/webhooks/endpoints", WebhookEndpoint, params))

    def patch_webhook(
        self,
        endpoint_id: str,
        *,
        events: Sequence[str] | None = None,
        description: str | None = None,
        enabled: bool | None = None,
    ) -> WebhookEndpoint:
        given: dict[str, Any] = {
            "events": None if events is None else list(events),
            "description": description,
            "enabled": enabled,
        }
        body = {k: v for k, v in given.items() if v is not None}
        path = f"/v1/webhooks/endpoints/{endpoint_id}"
        return WebhookEndpoint.model_validate(self._json("PATCH", path, json=body))

    def delete_webhook(self, endpoint_id: str) -> WebhookEndpoint:
        path = f"/v1/webhooks/endpoints/{endpoint_id}"
        return WebhookEndpoint.model_validate(self._json("DELETE", path))

    def rotate_webhook_secret(self, endpoint_id: str) -> dict[str, Any]:
        """``{id, secret, previous_secret_valid_until}``: the new secret, shown only now."""
        path = f"/v1/webhooks/endpoints/{endpoint_id}/rotate-secret"
        return dict(self._json("POST", path))

    def webhook_deliveries(
        self,
        *,
        job: str | None = None,
        endpoint: str | None = None,
        status: str | None = None,
        team: str | None = None,
        limit: int = 50,
    ) -> builtins.list[WebhookDelivery]:
        """The newest ``limit`` deliveries matching the filters."""
        params = {"job": job, "endpoint": endpoint, "status": status, "team": team}
        pages = self._pages("/v1/webhooks/deliveries", WebhookDelivery, {**params, "limit": limit})
        return list(itertools.islice(pages, limit))

    def resend_webhook(self, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again now, under the same ``webhook-id``."""
        path = f"/v1/webhooks/deliveries/{delivery_id}/resend"
        return WebhookDelivery.model_validate(self._json("POST", path))

    # -- datasets and base models in the store ------------------------------------------------

    def _push(self, path: str, local: str | Path, name: str | None) -> StoredObject:
        parts = upload_parts(Path(local))
        try:
            data = {"name": name} if name else {}
            # Streamed from disk; no read/write timeout: a large model takes as long as it takes.
            timeout = httpx.Timeout(self._http.timeout.connect, read=None, write=None, pool=None)
            body = self._json("POST", path, files=parts, data=data, timeout=timeout)
        finally:
            for _, (_, handle) in parts:
                handle.close()
        return StoredObject.model_validate(body)

    def push_dataset(self, local: str | Path, *, name: str | None = None) -> StoredObject:
        """Upload a dataset file or folder (checked by the server: format, columns, rows)."""
        return self._push("/v1/datasets", local, name)

    def datasets(self) -> builtins.list[StoredObject]:
        return list(self._pages("/v1/datasets", StoredObject, {}))

    def dataset(self, dataset_id: str) -> StoredObject:
        return StoredObject.model_validate(self._json("GET", f"/v1/datasets/{dataset_id}"))

    def delete_dataset(self, dataset_id: str) -> None:
        self._request("DELETE", f"/v1/datasets/{dataset_id}")

    def push_model(self, local: str | Path, *, name: str | None = None) -> StoredObject:
        """Upload an HF-layout model folder (config.json, *.safetensors, tokenizer files)."""
        return self._push("/v1/models", local, name)

    def uploaded_models(self) -> builtins.list[StoredObject]:
        return list(self._pages("/v1/models/uploaded", StoredObject, {}))

    def uploaded_model(self, model_id: str) -> StoredObject:
        return StoredObject.model_validate(self._json("GET", f"/v1/models/{model_id}"))

    def delete_model(self, model_id: str) -> None:
        self._request("DELETE", f"/v1/models/{model_id}")


def raise_for_response_stream(response: httpx.Response) -> None:
    """Like :func:`raise_for_response` for a streamed response (reads the body first)."""
    if not response.is_success:
        response.read()
        raise_for_response(response)


def _stream_event(name: str, data: str) -> StreamEvent:
    """Decode one SSE message into a :class:`StreamEvent` (data is JSON when it parses)."""
    try:
        payload: Any = json.loads(data) if data else None
    except ValueError:
        payload = data
    event = StreamEvent(event=name or "message", data=payload)
    if isinstance(payload, dict):
        if name in ("metric", "metrics", "point") and "step" in payload and "name" in payload:
            event.point = MetricPoint.model_validate(payload)
        if isinstance(payload.get("status"), str):
            event.status = payload["status"]
    return event
