"""``python -m worker.stack_dump``: every hung rank's Python stacks, dumped on its own node.

Run as a Ray job by ``RayLauncher.dump_stacks`` (targets in ``SHUNTER_STACK_TARGETS``, JSON:
``[{"rank", "pid", "node_id"}]``, never a shell string). One zero-CPU task per rank, pinned
to the rank's node with ``NodeAffinitySchedulingStrategy(soft=False)`` (a full cluster still
runs it), calls ``dump_process``; the job prints one JSON line prefixed ``shunter-stacks:``.

``dump_process(pid)`` samples the process state and CPU time over ``sample_s`` (a stopped or
blocked rank uses none), then ``py-spy dump --nonblocking`` (reads the process's memory,
never ptrace-stops it, so it works on a SIGSTOPped process too; needs the same user or
CAP_SYS_PTRACE), else each thread's kernel wait channel from ``/proc``. Never raises.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shunter.wire import STACK_TARGETS_ENV, STACKS_PREFIX

__all__ = ["PREFIX", "TARGETS_ENV", "dump_process"]

PREFIX = STACKS_PREFIX
TARGETS_ENV = STACK_TARGETS_ENV
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, CPU seconds) of ``pid`` from ``/proc/<pid>/stat``; None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return fields[0], (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _proc_stacks(pid: int) -> str:
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*"), key=lambda p: int(p.name)):
        try:
            wchan = (task / "wchan").read_text().strip() or "-"
            comm = (task / "comm").read_text().strip()
        except OSError:
            continue
        lines.append(f"thread {task.name} ({comm}): waiting in {wchan}")
        with contextlib.suppress(OSError):  # /proc/<pid>/stack needs root
            lines += ["    " + k for k in (task / "stack").read_text().splitlines()]
    return "\n".join(lines)


def dump_process(pid: int, *, sample_s: float = 1.0, timeout_s: float = 20.0) -> dict[str, Any]:
    """``{"state", "cpu_s", "text"}`` of one process (state ``gone`` when it has exited)."""
    first = _stat(pid)
    if first is None:
        return {"state": "gone", "cpu_s": None, "text": f"process {pid} not found"}
    time.sleep(sample_s)
    second = _stat(pid) or first
    text = ""
    spy = _py_spy()
    if spy is not None:
        try:
            done = subprocess.run(
                [spy, "dump", "--nonblocking", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            text = done.stdout if done.returncode == 0 else ""
            if not text:
                text = f"py-spy failed ({done.returncode}): {done.stderr.strip()[:500]}\n"
        except (OSError, subprocess.TimeoutExpired) as e:
            text = f"py-spy failed: {type(e).__name__}: {e}\n"
    if not text.startswith(("Process", "Thread")):  # no Python stacks: the kernel's view
        text += _proc_stacks(pid)
    return {"state": second[0], "cpu_s": round(second[1] - first[1], 3), "text": text}


def main() -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    targets = json.loads(os.environ[TARGETS_ENV])
    ray.init()
    dump = ray.remote(num_cpus=0, max_retries=0)(dump_process)
    refs = [
        dump.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(t["node_id"], soft=False)
        ).remote(int(t["pid"]))
        for t in targets
    ]
    out = []
    for t, ref in zip(targets, refs, strict=True):
        try:
            got = ray.get(ref, timeout=60)
        except Exception as e:  # the node is gone, the task failed: say so for this rank
            got = {"state": "?", "cpu_s": None, "text": f"dump failed: {type(e).__name__}: {e}"}
        out.append({"rank": t["rank"], **got})
    print(PREFIX + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
