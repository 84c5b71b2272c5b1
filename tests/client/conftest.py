"""Fixtures for the client tests: one live API server per test module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The harness is imported by tests/cli and tests/browser too; make it importable the same
# way whatever pytest's import mode is.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_server import LiveServer, live_server


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(tmp_path_factory.mktemp("live")) as server:
        yield server
