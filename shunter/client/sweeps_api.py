"""The sweep endpoints of :class:`shunter.client.Client`."""

from __future__ import annotations

import builtins
import json

from shunter.client.responses import Sweep
from shunter.client.transport import SpecInput, Transport, load_spec, poll_until_terminal

__all__ = ["SweepsAPI"]


class SweepsAPI(Transport):
    """``/v1/sweeps/...``."""

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
        return poll_until_terminal(
            lambda: self.sweep(sweep_id), f"sweep {sweep_id}", timeout=timeout, poll=poll
        )
