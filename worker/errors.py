"""Turn the exception that ended a training run into the job's ``error {type, message}``.

A pure function over exception objects (no torch or Ray import), so it is table-tested.
Ray wraps what a worker raised: ``WorkerGroupError.worker_failures`` maps rank -> exception,
``ControllerError.controller_failure`` holds one, and a remote exception (``RayTaskError``)
is usually an instance of the original type too and keeps it as ``cause``. We unwrap all of
those, then classify by the innermost real cause:

- ``oom``: torch's ``OutOfMemoryError`` / "CUDA out of memory" / ``MemoryError`` / Ray's
  memory monitor killing a worker (``ray.exceptions.OutOfMemoryError``).
- ``user_error``: the job's inputs are wrong: a missing or unreadable file (the message names
  the path), or an error trainer_core raises for bad config/data (``ValueError``/``KeyError``
  from a spec-derived value, ``UserError`` by name).
- ``infra_lost``: a node, actor or worker process died under us.
- ``internal``: anything else (our bug); the message carries the type and text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["ErrorInfo", "classify", "root_causes"]

_MAX_MESSAGE = 2000

_OOM_NAMES = frozenset({"OutOfMemoryError", "MemoryError"})
_OOM_TEXT = ("out of memory", "cuda oom", "cannot allocate memory", "defaultcpuallocator")
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
_USER_NAMES = frozenset({"UserError", "DatasetError", "ConfigError", "ValueError", "KeyError"})
_INFRA_NAMES = frozenset(
    {
        "ActorDiedError",
        "ActorUnavailableError",
        "NodeDiedError",
        "WorkerCrashedError",
        "RayActorError",
        "ObjectLostError",
        "OwnerDiedError",
        "PreemptionError",
    }
)


@dataclass(frozen=True, kw_only=True)
class ErrorInfo:
    type: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"type": self.type, "message": self.message}


def _mro_names(exc: BaseException) -> set[str]:
    return {k.__name__ for k in type(exc).__mro__}


def root_causes(exc: BaseException) -> Iterator[BaseException]:
    """Yield the innermost causes of ``exc`` through Ray's wrappers and ``__cause__`` chains."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        inner: list[BaseException] = []
        failures = getattr(e, "worker_failures", None)
        if isinstance(failures, dict):
            inner += [f for _, f in sorted(failures.items()) if isinstance(f, BaseException)]
        for attr in ("controller_failure", "cause"):
            c = getattr(e, attr, None)
            if isinstance(c, BaseException) and c is not e:
                inner.append(c)
        if e.__cause__ is not None:
            inner.append(e.__cause__)
        if inner:
            stack.extend(reversed(inner))
        else:
            yield e


def _one(exc: BaseException) -> ErrorInfo:
    names = _mro_names(exc)
    text = str(exc)
    low = text.lower()
    msg = f"{type(exc).__name__}: {text}"[:_MAX_MESSAGE]
    if names & _OOM_NAMES or any(t in low for t in _OOM_TEXT):
        return ErrorInfo(type="oom", message=msg)
    if isinstance(exc, _PATH_ERRORS):
        path = getattr(exc, "filename", None)
        if path and str(path) not in text:
            msg = f"{msg} (path: {path})"[:_MAX_MESSAGE]
        return ErrorInfo(type="user_error", message=msg)
    if names & _INFRA_NAMES:
        return ErrorInfo(type="infra_lost", message=msg)
    if names & _USER_NAMES:
        return ErrorInfo(type="user_error", message=msg)
    return ErrorInfo(type="internal", message=msg)


# When ranks fail differently, the most specific cause wins (a rank's real OOM or bad path
# explains the others, which usually die of a broken collective).
_RANK = {"oom": 0, "user_error": 1, "internal": 2, "infra_lost": 3}


def classify(exc: BaseException) -> ErrorInfo:
    """The job-level error for the exception that ended a run."""
    infos = [_one(c) for c in root_causes(exc)] or [_one(exc)]
    return min(infos, key=lambda i: _RANK.get(i.type, 9))
