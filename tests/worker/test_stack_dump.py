"""``worker.stack_dump.dump_process`` on a real SIGSTOPped Python process (no Ray): the state
says stopped, no CPU time moves, and py-spy reads its Python stack without ptrace-stopping it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from worker.stack_dump import dump_process

CHILD = """
import time
def wait_for_the_gang():
    while True:
        time.sleep(0.05)
wait_for_the_gang()
"""


def test_dump_of_a_stopped_process_has_its_python_stack() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD])
    try:
        time.sleep(1.0)  # let it reach the loop
        os.kill(child.pid, signal.SIGSTOP)
        got = dump_process(child.pid, sample_s=0.3)
        assert got["state"] == "T" and got["cpu_s"] == 0.0, got
        assert "wait_for_the_gang" in got["text"], got["text"]
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.kill()
        child.wait(10)


def test_dump_of_a_gone_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)
    assert dump_process(child.pid, sample_s=0.01)["state"] == "gone"
