"""Process-group helpers for tests that start (and must stop) whole process groups."""

from __future__ import annotations

import contextlib
import os
import signal


def group_alive(pgid: int) -> bool:
    """Whether any process is left in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left of group ``pgid`` (cleanup after a test)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
