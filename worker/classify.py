"""Turn the exception that ended a training run into the job's ``error {type, message}``.

A pure function over exception objects (no torch or Ray import), so it is table-tested.
Ray wraps what a worker raised: ``WorkerGroupError.worker_failures`` maps rank -> exception,
``ControllerError.controller_failure`` holds one, and a remote exception (``RayTaskError``)
is usually an instance of the original type too and keeps it as ``cause``. We unwrap all of
those, then classify each innermost cause by WHERE it arose, not by its type (a ``KeyError``
in our training loop is our bug; the same ``KeyError`` while reading the user's data is theirs):

0. ``diverged``: the loop's divergence guard gave up (``trainer_core.health.Diverged``);
   ``data_corrupt``: a stored object (dataset, model, tokenised data) does not verify against
   its manifest or listing (``worker.object_cache.DataCorrupt``; the message names it);
   ``storage_unavailable``: the object store stayed away past the bound
   (``storage.StorageUnavailable``), or an S3 fault outlived the SDK's own retries in Ray
   Train's checkpoint upload (an ``OSError`` naming an AWS error that is not a refusal). The
   service requeues the attempt from its last verified checkpoint (an infra retry).
1. ``oom`` by nature: torch's ``OutOfMemoryError`` / "CUDA out of memory" / ``MemoryError`` /
   Ray's memory monitor killing a worker.
2. Errors our code raises on purpose to blame the inputs (``SpecError``, ``DataFileError``,
   ``DeepSpeedConfigError``, ``UserError``...): ``user_error``. Ray's actor/node death
   errors: ``infra_lost``.
3. Otherwise the frames of the traceback (a local ``__traceback__``, or the remote traceback
   text Ray carries), innermost first: the first frame in a known place decides (``_PLACES``):
   reading the spec, data, tokenizer or model config -> ``user_error``; collectives and Ray
   internals -> ``infra_lost``; the rest of trainer_core/worker -> ``internal`` (our bug).
4. No frame at all: a missing/unreadable path is ``user_error`` (the message names it);
   anything else ``internal``.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

from storage import is_transient

__all__ = ["ErrorInfo", "classify", "place_of", "root_causes"]

_MAX_MESSAGE = 2000

USER, INFRA, INTERNAL = "user_error", "infra_lost", "internal"
DIVERGED = "diverged"  # trainer_core.health.Diverged: the divergence guard gave up
DATA_CORRUPT = "data_corrupt"  # worker.object_cache.DataCorrupt: a stored object is corrupt
STORAGE = "storage_unavailable"  # storage.StorageUnavailable: the object store stayed away

_OOM_NAMES = frozenset({"OutOfMemoryError", "MemoryError"})
_OOM_TEXT = ("out of memory", "cuda oom", "cannot allocate memory", "defaultcpuallocator")
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
# Raised by our code precisely to say "the job's inputs are wrong".
_USER_NAMES = frozenset(
    {
        "UserError",
        "DatasetError",
        "DataFileError",
        "SpecError",
        "DeepSpeedConfigError",
        "ConfigError",
    }
)
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
        "WorkerProcessDied",  # worker.warm: the forked training process was killed
    }
)

# Where a frame's file lives -> whose problem an error raised there is. First match wins, so
# the input-reading modules of trainer_core come before trainer_core as a whole. Third-party
# packages match only under site-packages/dist-packages (Ray's images live in /home/ray).
_OURS: tuple[tuple[str, str], ...] = (
    ("/shunter/jobspec/", USER),
    ("/trainer_core/data.py", USER),
    ("/trainer_core/formats.py", USER),
    ("/trainer_core/hub.py", USER),
    ("/trainer_core/tasks/", USER),
    ("/trainer_core/config.py", USER),
    ("/trainer_core/parallel/config.py", USER),
)
_THIRD_PARTY: tuple[tuple[str, str], ...] = (
    ("datasets/", USER),
    ("huggingface_hub/", USER),
    ("transformers/configuration_utils.py", USER),
    ("transformers/tokenization_utils", USER),
    ("transformers/models/auto/", USER),
    ("torch/distributed/", INFRA),
    ("ray/", INFRA),
)
_PLACES: tuple[tuple[str, str], ...] = (
    *_OURS,
    *(
        (f"{site}-packages/{frag}", place)
        for frag, place in _THIRD_PARTY
        for site in ("site", "dist")
    ),
    ("/trainer_core/", INTERNAL),
    ("/worker/", INTERNAL),
)
_FILE_LINE = re.compile(r'File "([^"]+)", line \d+')


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


def _files(exc: BaseException) -> list[str]:
    """Source files of the traceback, innermost first: the local one, else Ray's text."""
    if exc.__traceback__ is not None:
        return [f.filename for f in reversed(traceback.extract_tb(exc.__traceback__))]
    for attr in ("traceback_str", "_traceback_str"):
        text = getattr(exc, attr, None)
        if isinstance(text, str) and text:
            return list(reversed(_FILE_LINE.findall(text)))
    return list(reversed(_FILE_LINE.findall(str(exc))))


def place_of(files: list[str]) -> str | None:
    """Whose problem an error raised along ``files`` (innermost first) is; None if unknown."""
    for name in files:
        path = name.replace("\\", "/")
        for fragment, place in _PLACES:
            if fragment in path:
                return place
    return None


def _one(exc: BaseException) -> ErrorInfo:
    names = _mro_names(exc)
    text = str(exc)
    msg = f"{type(exc).__name__}: {text}"[:_MAX_MESSAGE]
    if "Diverged" in names:  # by name: this module imports no trainer_core (torch)
        return ErrorInfo(type=DIVERGED, message=msg)
    if "DataCorrupt" in names:  # by name too: raised in a worker, it may come back wrapped
        return ErrorInfo(type=DATA_CORRUPT, message=msg)
    if "StorageUnavailable" in names or ("AWS Error" in text and is_transient(exc)):
        return ErrorInfo(type=STORAGE, message=msg)
    if names & _OOM_NAMES or any(t in text.lower() for t in _OOM_TEXT):
        return ErrorInfo(type="oom", message=msg)
    if isinstance(exc, _PATH_ERRORS):
        path = getattr(exc, "filename", None)
        if path and str(path) not in text:
            msg = f"{msg} (path: {path})"[:_MAX_MESSAGE]
    if names & _USER_NAMES:
        return ErrorInfo(type=USER, message=msg)
    if names & _INFRA_NAMES:
        return ErrorInfo(type=INFRA, message=msg)
    place = place_of(_files(exc))
    if place is None:
        place = USER if isinstance(exc, _PATH_ERRORS) else INTERNAL
    return ErrorInfo(type=place, message=msg)


# When ranks fail differently, the most specific cause wins (a rank's real OOM or bad path
# explains the others, which usually die of a broken collective).
_RANK = {DIVERGED: 0, "oom": 0, DATA_CORRUPT: 1, USER: 1, STORAGE: 1, INTERNAL: 2, INFRA: 3}


def classify(exc: BaseException) -> ErrorInfo:
    """The job-level error for the exception that ended a run."""
    infos = [_one(c) for c in root_causes(exc)] or [_one(exc)]
    return min(infos, key=lambda i: _RANK.get(i.type, 9))
