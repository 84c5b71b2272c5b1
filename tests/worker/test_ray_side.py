"""``RaySide``'s one signature: a warm child's ``RelayedRay`` call reaches the Ray worker's
``InProcessRay`` as the same call, over the warm channel (no Ray needed: the in-process
calls are recorded, not made)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from worker.ray_side import InProcessRay, RelayedRay
from worker.warm.protocol import recv_obj, send_obj


class _Recorded(InProcessRay):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def _report(
        self, metrics: dict[str, Any], checkpoint_dir: str | None, upload: bool, local_rank: int
    ) -> None:
        self.calls.append(("report", metrics, checkpoint_dir, upload, local_rank))

    def _checkpoint(self, as_uri: bool) -> str | None:
        self.calls.append(("checkpoint", as_uri))
        return "s3://bucket/run/checkpoint-4" if as_uri else None


def _answer(sock: socket.socket, side: InProcessRay, n: int) -> None:
    for _ in range(n):
        op, body = recv_obj(sock)
        assert op == "call"
        send_obj(sock, side.answer(body))


def test_relayed_calls_arrive_as_the_same_calls() -> None:
    here, there = socket.socketpair()
    side = _Recorded()
    t = threading.Thread(target=_answer, args=(there, side, 4))
    t.start()
    relayed = RelayedRay(here)
    relayed.report({"loss": 1.5})
    relayed.report({"loss": 1.0}, "/stage/checkpoint-4", upload=True, local_rank=1)
    assert relayed.checkpoint(as_uri=True) == "s3://bucket/run/checkpoint-4"
    assert relayed.checkpoint(as_uri=False) is None
    t.join(5)
    here.close()
    there.close()
    assert side.calls == [
        ("report", {"loss": 1.5}, None, False, 0),
        ("report", {"loss": 1.0}, "/stage/checkpoint-4", True, 1),
        ("checkpoint", True),
        ("checkpoint", False),
    ]


def test_an_unknown_call_is_refused() -> None:
    with pytest.raises(ValueError, match="no such Ray call"):
        InProcessRay().answer(("shutdown", ()))
