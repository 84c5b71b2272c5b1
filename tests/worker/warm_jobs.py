"""What the warm children of ``test_warm.py`` run (imported in the child, by module name)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import random
import sys
import threading
import time
from typing import Any

from worker import warm

_KEPT: list[Any] = []  # job 1's open file lives here


def echo(channel: Any) -> dict[str, Any]:
    asked = warm.payload(channel)
    print(f"warm child {os.getpid()} says {asked}", flush=True)
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "env": os.environ.get("WARM_TEST_VAR"),
        "cwd": os.getcwd(),
        "answer": warm.call(channel, asked),
    }


def sleep_forever(channel: Any) -> None:
    warm.payload(channel)
    print(f"warm child {os.getpid()} sleeping", flush=True)
    while True:
        time.sleep(1)


def raise_it(channel: Any) -> None:
    raise warm.payload(channel)


def exit_early(channel: Any) -> None:
    warm.payload(channel)
    os._exit(3)


# -- isolation ------------------------------------------------------------------------------
def snapshot() -> dict[str, Any]:
    """What a job could see of an earlier one in this process."""
    import numpy as np
    import torch
    import torch.distributed as dist

    import trainer_core.loop
    import trainer_core.reporter

    files = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            files.append("socket" if target.startswith("socket:") else target)
    return {
        "module_global": sorted(map(str, trainer_core.reporter._control)),
        "module_attr": hasattr(trainer_core.loop, "_left_by_job_1"),
        "env": os.environ.get("SHUNTER_LEFT_BY_JOB_1"),
        "files": sorted(files),
        "random": hashlib.sha256(pickle.dumps(random.getstate())).hexdigest(),
        "numpy": hashlib.sha256(pickle.dumps(np.random.get_state())).hexdigest(),
        "torch_seed": torch.initial_seed(),
        "torch_rng": hashlib.sha256(torch.get_rng_state().numpy().tobytes()).hexdigest(),
        "process_group": dist.is_available() and dist.is_initialized(),
        "new_module": "wave" in sys.modules,
        "threads": threading.active_count(),
        "torch_threads": torch.get_num_threads(),
        "cwd": os.getcwd(),
    }


def _leave_traces(tmp: str) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    import trainer_core.loop
    import trainer_core.reporter

    trainer_core.reporter._control[12345] = "job 1's gloo group"
    trainer_core.loop._left_by_job_1 = True  # type: ignore[attr-defined]
    os.environ["SHUNTER_LEFT_BY_JOB_1"] = "1"
    _KEPT.append(open(os.path.join(tmp, "left-open-by-job-1.txt"), "w"))  # noqa: SIM115
    random.seed(1234)
    np.random.seed(1234)
    torch.manual_seed(1234)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
    import wave  # noqa: F401  (a module the template never imported)

    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    torch.set_num_threads(1)
    os.chdir(tmp)


def job_1(channel: Any) -> dict[str, Any]:
    _leave_traces(warm.payload(channel))
    return snapshot()


def job_2(channel: Any) -> dict[str, Any]:
    warm.payload(channel)
    return snapshot()
