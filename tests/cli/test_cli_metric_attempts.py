"""``shunter metrics`` on a resumed job: each step once, from the newest attempt that ran it
(the API's default); ``--all-attempts`` shows every attempt's points with their attempt.
And the watcher's store (``shunter submit --watch``) keeps the same rule for points the
stream delivers late."""

from __future__ import annotations

import csv
import io
import uuid

from live_server import LiveServer, valid_spec
from typer.testing import CliRunner, Result

from shunter.cli import app
from shunter.cli.watch import MetricStore
from shunter.client.responses import MetricPoint


def run(live: LiveServer, *args: str, token: str) -> Result:
    result = CliRunner().invoke(app, [*args, "--url", live.url, "--token", token])
    assert result.exit_code == 0, result.output
    return result


def _rows(result: Result) -> list[list[str]]:
    return list(csv.reader(io.StringIO(result.stdout)))


def test_metrics_show_each_step_once_unless_all_attempts(live: LiveServer) -> None:
    member = live.member_token(f"attempts-{uuid.uuid4().hex[:6]}")
    client = live.client(member)
    job = client.submit(valid_spec("resumed"))
    first = live.driver(job.id)
    first.status("running")
    for step in (1, 2, 3, 4):
        first.loss(step, 10)
    client.pause(job.id)  # attempt 1 checkpoints at 2 (it had reached 4) and ends paused
    first.checkpoint(2)
    first.status("preempted", step=4)
    client.resume(job.id)
    second = live.driver(job.id, attempt=2)  # resumes from step 2: steps 3, 4 run again
    second.status("running")
    for step in (3, 4, 5):
        second.loss(step, 10)

    rows = _rows(run(live, "metrics", job.id, "--name", "loss", "--csv", token=member))
    assert rows[0] == ["step", "name", "value", "time"]
    assert [r[0] for r in rows[1:]] == ["1", "2", "3", "4", "5"]
    every = _rows(
        run(live, "metrics", job.id, "--name", "loss", "--csv", "--all-attempts", token=member)
    )
    assert every[0] == ["step", "name", "value", "time", "attempt"]
    assert [(r[0], r[4]) for r in every[1:]] == [
        ("1", "1"), ("2", "1"), ("3", "1"), ("4", "1"), ("3", "2"), ("4", "2"), ("5", "2")
    ]  # fmt: skip
    table = run(live, "metrics", job.id, "--all-attempts", token=member).stdout
    assert "ATTEMPT" in table
    assert "ATTEMPT" not in run(live, "metrics", job.id, token=member).stdout


def test_the_watchers_store_keeps_the_newest_attempts_point() -> None:
    store = MetricStore()
    for i, (step, attempt, value) in enumerate(
        [(3, 1, 1.3), (3, 2, 2.3), (3, 1, 9.9), (4, 2, 2.4), (4, 3, 3.4)], start=1
    ):
        store.add(MetricPoint(id=i, attempt=attempt, step=step, name="loss", value=value))
    assert store.series("loss") == [(3, 2.3), (4, 3.4)]  # the late attempt-1 point: ignored
    assert store.last_id == 5  # every point counts for where the stream resumes
