"""An exclusive ``flock`` on a file, waited for up to a timeout: the one lock the node-local
caches and the warm-pool client take."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["flocked"]


@contextmanager
def flocked(
    path: Path,
    timeout_s: float,
    *,
    poll_s: float = 0.05,
    timed_out: Callable[[str], Exception] = TimeoutError,
) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if missing) for the block; past
    ``timeout_s`` of waiting, raise ``timed_out(message)``."""
    with open(path, "a") as fh:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise timed_out(f"{path} stayed locked for over {timeout_s:.0f} s") from None
                time.sleep(poll_s)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
