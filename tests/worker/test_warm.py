"""``worker.warm``: children forked from a template carry nothing of earlier jobs, die with
their requester, and fail the way an in-process worker fails (no Ray here: the zygote and its
children are real processes; ``warm_jobs`` is what the children run)."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from worker import warm
from worker.classify import classify

LIGHT = ["json"]  # a template that imports next to nothing: the mechanics, fast
HERE = Path(__file__).resolve().parent


def _spawn(target: str, *, kind: str = "wtest", modules: list[str] | None = None,
           **kw: Any) -> warm.Child:  # fmt: skip
    return warm.spawn(kind, f"warm_jobs:{target}", modules=modules or LIGHT,
                      watch_pid=os.getpid(), idle_s=30, **kw)  # fmt: skip


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_child_has_the_requesters_env_cwd_and_stdout(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with open(out, "w") as fh:
        child = _spawn("echo", env={**os.environ, "WARM_TEST_VAR": "seen"}, cwd=str(tmp_path),
                       stdout=fh.fileno())  # fmt: skip
        got = warm.serve(child, lambda asked: f"answered {asked}", payload="hello")
    assert got["env"] == "seen" and got["cwd"] == str(tmp_path)
    assert got["answer"] == "answered hello"
    assert got["ppid"] != os.getpid()  # forked by the zygote, not by us
    assert f"warm child {got['pid']} says hello" in out.read_text()


def test_concurrent_requesters_share_one_zygote() -> None:
    kind = f"wtest-{os.getpid()}-{time.monotonic_ns()}"  # a template nobody has started
    parents: list[int] = []

    def one() -> None:
        child = _spawn("echo", kind=kind)
        parents.append(warm.serve(child, lambda asked: asked)["ppid"])

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(parents) == 3 and len(set(parents)) == 1, parents


# -- failures: classified as the same failure in-process would be ---------------------------
def _as_ray_carries(exc: BaseException) -> BaseException:
    """What the driver receives of a Ray Train worker's exception: a pickled copy."""
    copy: BaseException = pickle.loads(pickle.dumps(exc))
    return copy


def _failures() -> list[BaseException]:
    import torch

    from trainer_core.formats import DataFileError
    from trainer_core.health import Diverged

    return [
        DataFileError("train.jsonl line 3: not JSON"),
        FileNotFoundError(2, "No such file or directory", "/data/nope.tsv"),
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        MemoryError(),
        Diverged(7, 2.5, 3),
        KeyError("label"),
        RuntimeError("boom"),
    ]


def test_a_childs_exception_is_classified_as_in_process() -> None:
    for exc in _failures():
        in_process = classify(_as_ray_carries(exc))
        with pytest.raises(BaseException) as raised:
            warm.serve(_spawn("raise_it"), lambda asked: None, payload=exc)
        assert type(raised.value) is type(exc)
        assert "raised in the warm training process" in "".join(raised.value.__notes__)
        assert classify(_as_ray_carries(raised.value)) == in_process, exc


def test_a_killed_child_is_a_lost_worker() -> None:
    child = _spawn("sleep_forever")
    threading.Timer(0.5, os.kill, (child.pid, signal.SIGKILL)).start()
    with pytest.raises(warm.WorkerProcessDied, match="SIGKILL") as raised:
        warm.serve(child, lambda asked: None)
    assert classify(_as_ray_carries(raised.value)).type == "infra_lost"


def test_a_child_that_exits_without_a_word_is_a_lost_worker() -> None:
    with pytest.raises(warm.WorkerProcessDied, match="exit code 3"):
        warm.serve(_spawn("exit_early"), lambda asked: None)


def test_a_failing_handler_kills_the_child() -> None:
    child = _spawn("echo")

    def handle(asked: Any) -> Any:
        raise RuntimeError("ray.train.report failed")

    with pytest.raises(RuntimeError, match="report failed"):
        warm.serve(child, handle)
    assert _gone(child.pid)


def test_the_child_dies_with_its_requester(tmp_path: Path) -> None:
    script = (
        "import os\nfrom worker import warm\n"
        f"c = warm.spawn('wtest', 'warm_jobs:sleep_forever', modules={LIGHT!r}, idle_s=30)\n"
        "warm.serve(c, lambda asked: None)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    requester = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                 text=True)  # fmt: skip
    try:
        assert requester.stdout is not None
        line = requester.stdout.readline()
        assert "sleeping" in line, line
        pid = int(line.split()[2])
        requester.kill()  # SIGKILL: the requester cannot say goodbye
        requester.wait(10)
        assert _gone(pid), "the child outlived its requester"
    finally:
        requester.kill()


def test_a_template_that_cannot_start_is_not_tried_again() -> None:
    modules = ["json", f"no_such_module_{os.getpid()}"]
    with pytest.raises(warm.WarmUnavailable, match="No module named"):
        _spawn("echo", modules=modules)
    t0 = time.monotonic()
    with pytest.raises(warm.WarmUnavailable, match="No module named"):
        _spawn("echo", modules=modules)
    assert time.monotonic() - t0 < 1.0  # answered from the marker, no second start
    for marker in Path(f"/tmp/shz-{os.getuid()}").glob("wtest-*.failed"):
        if modules[1] in marker.read_text():
            for suffix in (".failed", ".log", ".lock"):
                marker.with_suffix(suffix).unlink(missing_ok=True)


def test_the_zygote_exits_with_the_process_it_watches() -> None:
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        kind = f"wtest-watch-{os.getpid()}"
        child = warm.spawn(kind, "warm_jobs:echo", modules=LIGHT, watch_pid=watched.pid)
        zygote = warm.serve(child, lambda asked: None)["ppid"]
        sockets = list(Path(f"/tmp/shz-{os.getuid()}").glob(f"{kind}-*.sock"))
        assert len(sockets) == 1
        watched.kill()
        watched.wait()
        assert _gone(zygote), "the zygote outlived the raylet it watches"
        assert not sockets[0].exists()
    finally:
        watched.kill()


def test_the_switch() -> None:
    assert warm.enabled("train", {})
    assert warm.enabled("train", {"SHUNTER_WARM_WORKERS": "1"})
    for off in ("0", "false", "off", "no"):
        assert not warm.enabled("train", {"SHUNTER_WARM_WORKERS": off})


# -- isolation: the real training template ------------------------------------------------
def test_a_second_job_sees_nothing_of_the_first(tmp_path: Path) -> None:
    """Job 1 changes everything a later job could trip over; job 2, forked from the same
    template afterwards, must see the template's state, not job 1's. Job 1's own snapshot
    is the control: it shows that ``snapshot`` sees each trace where one exists."""
    train = warm.TEMPLATES["train"]

    def run(target: str) -> dict[str, Any]:
        got: dict[str, Any] = warm.serve(
            _spawn(target, kind="train", modules=train, timeout_s=600), lambda a: None,
            payload=str(tmp_path),
        )  # fmt: skip
        return got

    before, first, second = run("job_2"), run("job_1"), run("job_2")
    left = str(tmp_path / "left-open-by-job-1.txt")
    # Job 1 left each trace in its own process (the snapshot sees them) ...
    assert first["module_global"] == ["12345"] and first["module_attr"]
    assert first["env"] == "1" and left in first["files"]
    assert first["torch_seed"] == 1234 and first["process_group"] and first["new_module"]
    assert first["threads"] == 2 and first["torch_threads"] == 1
    assert first["cwd"] == str(tmp_path)
    # ... and job 2 sees none of them: the template's state, like the job before job 1.
    fresh = {"random", "numpy", "torch_seed", "torch_rng"}  # new entropy in every child, as in
    # every new process (torch too seeds its default generator from the OS at start-up)
    assert {k: v for k, v in second.items() if k not in fresh} == {
        k: v for k, v in before.items() if k not in fresh
    }
    assert second["module_global"] == [] and not second["module_attr"] and second["env"] is None
    assert left not in second["files"] and not second["process_group"]
    assert second["files"].count("socket") == 1  # its channel: none of the zygote's sockets
    assert second["torch_seed"] != 1234
    for key in fresh:
        assert len({before[key], first[key], second[key]}) == 3, key


# -- the driver's entrypoint: the job supervisor sees the child as if it were the entrypoint
def _entrypoint(target: str) -> subprocess.Popen[str]:
    script = (
        "import sys\nfrom worker.launch_driver import run\n"
        f"sys.exit(run('wtest', 'warm_jobs:{target}', lambda: 99, modules={LIGHT!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    return subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip


def test_the_entrypoint_exits_with_its_childs_code() -> None:
    entry = _entrypoint("exit_early")
    assert entry.wait(60) == 3


def test_the_entrypoint_forwards_a_stop_and_dies_of_it() -> None:
    entry = _entrypoint("sleep_forever")
    try:
        assert entry.stdout is not None
        pid = int(entry.stdout.readline().split()[2])
        entry.send_signal(signal.SIGTERM)  # what Ray's job supervisor sends to stop a job
        assert entry.wait(30) == -signal.SIGTERM
        assert _gone(pid)
    finally:
        entry.kill()


def test_without_pidfd_the_raylet_is_polled(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.warm import zygote

    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")  # gVisor, Linux < 5.3

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    assert zygote._watch(os.getpid()) is None  # the serve loop polls instead
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert zygote._alive(os.getpid()) and not zygote._alive(gone.pid)
