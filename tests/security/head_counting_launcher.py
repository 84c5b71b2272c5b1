"""A launcher for ``test_serve_workers``: records in ``$SHUNTER_TEST_LAUNCH_LOG`` whether each
process started a head (no ``ray_address``) or joined one, like ``launcher.ray_launcher``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from service.launch import InMemoryLauncher


@dataclass
class _Config:
    dashboard_url: str
    gcs_address: str


class CountingLauncher(InMemoryLauncher):
    config: _Config


def from_settings(settings: Any) -> CountingLauncher:
    kind = f"join {settings.ray_address}" if settings.ray_address else "start-head"
    with open(os.environ["SHUNTER_TEST_LAUNCH_LOG"], "a") as fh:
        fh.write(f"{os.getpid()} {kind}\n")
    launcher = CountingLauncher()
    launcher.config = _Config("http://127.0.0.1:1", "127.0.0.1:2")
    return launcher
