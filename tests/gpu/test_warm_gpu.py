"""``worker.warm`` on a GPU: the training template imports without initialising CUDA, and its
forked children use CUDA and NCCL; a template that initialises CUDA is refused (a child of a
process that ran ``cuInit`` cannot use the GPU: "Cannot re-initialize CUDA in forked
subprocess"). Measured on an H100 (2026-11-26): docs/execution.md, "Warm processes"."""

from __future__ import annotations

import math
import os

import pytest
import torch

from worker import warm

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

TEMPLATE = [
    "torch",
    "torch.distributed",
    "transformers",
    "transformers.models.llama.modeling_llama",
]


def _run(modules: list[str], step: int) -> dict[str, object]:
    child = warm.spawn("gputest", "tests.gpu.warm_gpu_jobs:cuda_job", modules=modules,
                       watch_pid=os.getpid(), idle_s=60, timeout_s=600)  # fmt: skip
    got: dict[str, object] = warm.serve(child, lambda asked: None, payload=step)
    return got


def test_children_of_the_template_use_cuda_and_nccl() -> None:
    for step in (1, 2):  # the second child comes from the same, still untouched, template
        got = _run(TEMPLATE, step)
        assert got["initialized_at_start"] is False
        assert got["all_reduce"] == float(step)
        assert math.isfinite(float(got["loss"]))  # type: ignore[arg-type]


def test_a_template_that_initialises_cuda_is_refused() -> None:
    with pytest.raises(warm.WarmUnavailable, match="initialised CUDA"):
        _run([*TEMPLATE, "tests.gpu.warm_gpu_touch"], 1)
