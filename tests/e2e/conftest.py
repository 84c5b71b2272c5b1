"""One Ray head for the whole e2e session; a fresh API server (SQLite in tmp) per test.

Everything here is ``slow``: a real local Ray, real training processes. The head gets 4
logical CPUs (2-worker jobs plus room for a second job) on whatever cores the machine has.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ApiServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Short enough that a killed driver or a restart is noticed within seconds, long enough
# that a busy 2-core machine never loses a healthy attempt.
LEASE_S = 60.0
TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind. " * 200


@pytest.fixture(scope="session")
def ray_launcher() -> Iterator[Any]:
    from launcher.ray_launcher import start_embedded

    root = Path(tempfile.mkdtemp(prefix="shray-e2e-", dir="/tmp"))
    launcher = start_embedded(root, num_cpus=4, extra_env={"SHUNTER_HEARTBEAT_S": "1"})
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "tiny.txt").write_text(TEXT)
    return root


@pytest.fixture
def api(tmp_path: Path, data_root: Path, ray_launcher: Any) -> Iterator[ApiServer]:
    server = ApiServer(
        tmp_path / "home", data_root, ray_launcher, lease_seconds=LEASE_S, max_infra_retries=2
    ).start()
    try:
        yield server
    finally:
        server.stop_jobs()  # a failed test must not leave its jobs holding the shared head
        server.stop()
