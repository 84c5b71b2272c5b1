"""The job endpoints of :class:`shunter.client.Client`: submit, read, act on a job, and follow
its metrics and output."""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

import httpx
from httpx_sse import connect_sse

from shunter.client.download import repoint_adapter, unpack_model
from shunter.client.errors import ConnectionFailed, ShunterError
from shunter.client.responses import (
    Checkpoint,
    DryRun,
    Event,
    Job,
    MetricPoint,
    Page,
    StreamEvent,
)
from shunter.client.transport import (
    SpecInput,
    Transport,
    load_spec,
    poll_until_terminal,
    raise_for_response_stream,
)
from shunter.model_names import model_ref

__all__ = ["JobsAPI"]


class JobsAPI(Transport):
    """``/v1/jobs/...``."""

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
        all_attempts: bool = False,
    ) -> Iterator[MetricPoint]:
        """Metric points in arrival order; ``name`` filters, ``after`` starts past a point id.
        A step that a resumed attempt ran again comes once, from the newest attempt that ran
        it, unless ``all_attempts`` (each point carries its ``attempt``)."""
        params = {"name": name, "after": after, "limit": limit}
        if all_attempts:
            params["attempts"] = "all"
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
        return poll_until_terminal(
            lambda: self.get(job_id), f"job {job_id}", timeout=timeout, poll=poll
        )


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
