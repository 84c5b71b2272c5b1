"""The end of training waits for the attempt's queued checkpoint registrations.

The driver's final status fences the attempt: a registration that lands after it is refused
(409) and lost. So before ``fit()`` returns, the Train controller's ``after_controller_finish``
must flush the outbox. Ray Train gives a ``UserCallback`` none of the controller's hooks, so
this goes through what Ray itself assembles from the trainer ``build_trainer`` makes: its
controller callbacks, called as the controller calls them at the end.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from ray.train.v2._internal.execution.callback import ControllerCallback

import worker.checkpoint_callback as cc
from shunter.jobspec import JobSpec
from tests.service.svc_helpers import tiny_spec
from worker.driver import build_trainer

ENV = {
    "SHUNTER_API_URL": "http://127.0.0.1:9",
    "SHUNTER_ATTEMPT_TOKEN": "t",
    "SHUNTER_JOB_ID": "job-flush",
    "SHUNTER_ATTEMPT": "1",
}


class _AwayApi:
    """An internal API that answers only once ``back`` is set (a cut that ends)."""

    back = threading.Event()
    landed: list[tuple[str, Any]] = []

    def __init__(self, **_: Any) -> None:
        pass

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> None:
        if not self.back.wait(30):
            raise AssertionError("the cut never ended")
        self.landed.append((path, body))


def test_fit_returns_only_after_the_queued_registrations_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cc, "InternalApi", _AwayApi)
    monkeypatch.setattr(cc, "outbox_path", lambda job, attempt: tmp_path / f"{job}-{attempt}.jsonl")
    out = str(tmp_path / "out")
    raw = tiny_spec()
    raw["training"]["output_dir"] = out
    spec = JobSpec.model_validate(raw).model_dump(mode="json")
    trainer = build_trainer({"spec": spec, "output_dir": out, "resume_from": None}, ENV)

    ours = [cb for cb in trainer.run_config.callbacks if isinstance(cb, cc.ApiCallback)]
    assert len(ours) == 1
    body = {
        "step": 400,
        "uri": out + "/checkpoint-400",
        "bytes": 1,
        "metrics": {},
        "verified": True,
    }
    assert ours[0]._queue().put("checkpoints", body)  # what after_report queues, API away

    # What the controller calls once training is over (Ray's own list, as it builds it).
    finish = [
        cb
        for cb in trainer._create_default_callbacks()
        if isinstance(cb, ControllerCallback) and type(cb).__module__.startswith("worker.")
    ]
    ended = threading.Thread(target=lambda: [cb.after_controller_finish(None) for cb in finish])
    try:
        ended.start()
        ended.join(0.5)
        assert ended.is_alive(), "training ended with a registration still queued"
        assert _AwayApi.landed == []
    finally:
        _AwayApi.back.set()  # the API is back
    ended.join(30)
    assert not ended.is_alive()
    assert _AwayApi.landed == [("checkpoints", body)]  # landed before fit() would return
    cc._OUTBOXES.clear()
