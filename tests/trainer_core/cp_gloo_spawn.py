"""One spawn of 4 gloo ranks for both context-parallel CPU tests.

``test_context_parallel`` (dp x cp = 2 x 2) and ``test_context_parallel_3d``
(dp x cp x tp = 1 x 2 x 2) each need 4 CPU ranks; starting 4 processes (torch, transformers
and trainer_core imports) costs more than either run. Both parts run here, one after the
other, in the same process group; each writes its own results and checkpoint under its own
directory, and each test reads only its part. The first test to ask spawns; the other reads
the same results (once per pytest process).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp

_RESULTS: dict[str, Any] = {}


def _rank(rank: int, world: int, port: int, root: str) -> None:
    import torch.distributed as dist

    from tests.trainer_core import test_context_parallel as cp2d
    from tests.trainer_core import test_context_parallel_3d as cp3d
    from tests.trainer_core.test_strategies_harness import leave

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))  # fmt: skip
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        cp2d.dp_by_cp_steps(rank, str(Path(root) / "2d" / "cp.json"))
        cp3d.dp_tp_cp_steps(rank, str(Path(root) / "3d" / "cp3d.json"))
    finally:
        dist.destroy_process_group()
    leave()  # no interpreter teardown after a gloo group (it aborts now and then)


def gloo_results(tmp_path_factory: pytest.TempPathFactory, part: str) -> dict[str, Any]:
    """``part`` ("2d" or "3d")'s results from the shared 4-rank spawn."""
    from tests.trainer_core.test_strategies_harness import free_port

    if not _RESULTS:
        root = tmp_path_factory.mktemp("cp_gloo")
        for sub in ("2d", "3d"):
            (root / sub).mkdir()
        mp.spawn(_rank, args=(4, free_port(), str(root)), nprocs=4, join=True)
        _RESULTS["2d"] = json.loads((root / "2d" / "cp.json").read_text())
        _RESULTS["3d"] = json.loads((root / "3d" / "cp3d.json").read_text())
    return dict(_RESULTS[part])
