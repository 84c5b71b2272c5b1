"""The GPU-only paths of the engines: NCCL, FSDP2 mixed precision on CUDA, fp16 with a
grad scaler (plain and sharded), and DCP save/load of the scaler. Skipped without CUDA (CI
has none); run on a GPU host with ``pytest tests/trainer_core/test_strategies_gpu.py``.

One GPU is enough: a 1-rank NCCL group makes ``build_engine`` apply FSDP2 for real (on a
1-device mesh), while ``ddp`` with one rank is the plain single-process engine, the
reference. fp32 must match to 1e-4; bf16/fp16 follow the fp32 curve to 2e-2 and learn.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.trainer_core.test_strategies_harness import Job, run_job
from trainer_core.parallel import ParallelConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
TOL = 1e-4
MIXED_TOL = 2e-2


@pytest.fixture(scope="module")
def nccl_group() -> Iterator[torch.device]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield torch.device("cuda", 0)
    dist.destroy_process_group()


def _run(name: str, cfg: ParallelConfig, device: torch.device, **kw: Any) -> dict[str, Any]:
    return run_job(Job(name=name, cfg=cfg, last=kw.pop("last", 6), **kw), device)


def _close(a: list[float], b: list[float], tol: float) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def reference(nccl_group: torch.device) -> dict[str, Any]:
    return _run("single", ParallelConfig(), nccl_group)


def test_fsdp2_on_cuda_matches_single_fp32(
    nccl_group: torch.device, reference: dict[str, Any]
) -> None:
    got = _run("fsdp", ParallelConfig(strategy="fsdp"), nccl_group)
    assert _close(got["losses"], reference["losses"], TOL), (got, reference)
    assert reference["losses"][-1] < reference["losses"][0] - 0.1


@pytest.mark.parametrize(
    "cfg",
    [
        ParallelConfig(bf16=True),
        ParallelConfig(strategy="fsdp", bf16=True),
        ParallelConfig(fp16=True),
        ParallelConfig(strategy="fsdp", fp16=True),
    ],
    ids=["single-bf16", "fsdp-bf16", "single-fp16", "fsdp-fp16"],
)
def test_mixed_precision_follows_fp32(
    cfg: ParallelConfig, nccl_group: torch.device, reference: dict[str, Any]
) -> None:
    got = _run("mixed", cfg, nccl_group)
    assert all(torch.isfinite(torch.tensor(got["norms"])))
    assert _close(got["losses"], reference["losses"], MIXED_TOL), (got, reference)
    assert got["losses"] != reference["losses"]  # really ran in reduced precision


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_fp16_resume_restores_scaler(
    strategy: str, nccl_group: torch.device, tmp_path: Path
) -> None:
    cfg = ParallelConfig(strategy=strategy, fp16=True)  # type: ignore[arg-type]
    straight = _run("straight", cfg, nccl_group, save_after=3, save_dir=str(tmp_path / "c"))
    resumed = _run("resumed", cfg, nccl_group, first=4, load_from=str(tmp_path / "c"))
    assert _close(resumed["losses"], straight["losses"][3:], TOL), (resumed, straight)
