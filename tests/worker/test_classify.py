"""``worker.classify``: an error is classified by where it arose, not by its type."""

from __future__ import annotations

from typing import Any

import pytest

from worker.classify import classify, place_of

_SITE = "/opt/venv/lib/python3.11/site-packages"
_REPO = "/home/ray/app"  # Ray's images live under /home/ray: not a Ray frame


def _raised_in(path: str, exc: BaseException) -> BaseException:
    """``exc`` raised by a function whose code lives in ``path`` (a real traceback)."""
    ns: dict[str, Any] = {}
    exec(compile("def f(e):\n    raise e\n", path, "exec"), ns)
    try:
        ns["f"](exc)
    except BaseException as e:
        return e
    raise AssertionError("unreachable")


class RemoteError(Exception):
    """Ray's remote exception: no ``__traceback__``, the worker's traceback as text."""

    def __init__(self, cause: str, frames: list[str]) -> None:
        super().__init__(cause)
        lines = [f'  File "{f}", line 10, in fn\n    x()' for f in frames]
        self.traceback_str = "Traceback (most recent call last):\n" + "\n".join(lines)


@pytest.mark.parametrize(
    ("exc", "type_"),
    [
        # The same types, blamed by where they were raised.
        (_raised_in(f"{_REPO}/trainer_core/data.py", KeyError("label")), "user_error"),
        (_raised_in(f"{_REPO}/trainer_core/loop.py", KeyError("label")), "internal"),
        (_raised_in(f"{_REPO}/trainer_core/formats.py", ValueError("line 3: bad")), "user_error"),
        (_raised_in(f"{_REPO}/trainer_core/model.py", ValueError("shape")), "internal"),
        (_raised_in(f"{_SITE}/datasets/load.py", ValueError("no such split")), "user_error"),
        (_raised_in(f"{_SITE}/torch/distributed/c10d.py", RuntimeError("gloo")), "infra_lost"),
        (_raised_in(f"{_REPO}/trainer_core/checkpoint.py", FileNotFoundError(2, "x", "/o/c")),
         "internal"),
        # Ray's remote traceback text, innermost frame last.
        (RemoteError("'label'", [f"{_SITE}/ray/train/v2/worker.py",
                                  f"{_REPO}/trainer_core/loop.py", f"{_REPO}/trainer_core/data.py",
                                  f"{_SITE}/pandas/core/frame.py"]), "user_error"),
        (RemoteError("'label'", [f"{_SITE}/ray/train/v2/worker.py",
                                  f"{_REPO}/trainer_core/loop.py"]), "internal"),
        # No frames at all: a bare ValueError is no longer the user's.
        (ValueError("boom"), "internal"),
        (FileNotFoundError(2, "No such file", "/data/x.csv"), "user_error"),
    ],
)  # fmt: skip
def test_classified_by_place(exc: BaseException, type_: str) -> None:
    assert classify(exc).type == type_


def test_place_of_ignores_paths_that_only_look_like_ray() -> None:
    assert place_of([f"{_REPO}/worker/driver.py"]) == "internal"
    assert place_of(["/home/ray/notes/util.py"]) is None
