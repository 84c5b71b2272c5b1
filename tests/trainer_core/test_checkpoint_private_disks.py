"""Checkpoints when ranks do not share a disk (object storage: node-local staging).

Two gloo ranks train an FSDP2 model and save into DIFFERENT directories (each "node" has
its own ``output_dir``; neither can see the other's files). Each node must publish its own
part; rank 0's manifest must name every rank's files; a node's part alone (a partial
upload) must not verify; the union (what Ray Train's per-node upload makes in the bucket)
must verify, and must load on one rank (DCP resharding 2 -> 1) to the trained weights.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from tests.trainer_core.test_strategies_harness import leave
from trainer_core.checkpoint import load_checkpoint, prune_checkpoints, save_checkpoint
from trainer_core.manifest import MANIFEST, verify_checkpoint
from trainer_core.parallel.torch_engine import TorchEngine


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _engine(model: nn.Module, *, distributed: bool) -> tuple[TorchEngine, object]:
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    engine = TorchEngine(
        model=model,
        unwrapped=model,
        optimizer=opt,
        device=torch.device("cpu"),
        distributed=distributed,
    )
    return engine, sched


def _rank_main(rank: int, port: int, root: str, shared: bool) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)  # 2 cores shared by both ranks
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = _model()
        fully_shard(model)
        engine, sched = _engine(model, distributed=True)
        out = Path(root) / ("shared" if shared else f"node{rank}")
        for step in (1, 2, 3):
            torch.manual_seed(step)
            loss = model(torch.randn(4, 8)).pow(2).mean()
            loss.backward()
            engine.optimizer.step()
            engine.optimizer.zero_grad()
            save_checkpoint(out, step, engine, scheduler=sched, trainer_state={"global_step": step})
            prune_checkpoints(out, 2)
        full = engine.full_state_dict()
        if rank == 0:
            torch.save(full, Path(root) / "trained.pt")
        # Neither rank tears its sockets down while the other still has gloo work in flight:
        # a peer closing mid-collective aborts the other process ("terminate called").
        dist.barrier()
    finally:
        dist.destroy_process_group()
    leave()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _train(root: Path, *, shared: bool) -> None:
    mp.start_processes(
        _rank_main, args=(_free_port(), str(root), shared), nprocs=2, start_method="spawn"
    )


@pytest.mark.slow
def test_private_disks_each_node_publishes_its_part_and_only_the_union_verifies(
    tmp_path: Path,
) -> None:
    _train(tmp_path, shared=False)
    node0, node1 = tmp_path / "node0", tmp_path / "node1"
    for node in (node0, node1):  # every node published and pruned its own copy
        assert sorted(p.name for p in node.iterdir()) == ["checkpoint-2", "checkpoint-3"]
    part0, part1 = node0 / "checkpoint-3", node1 / "checkpoint-3"
    assert not (part1 / MANIFEST).exists()
    names = set(json.loads((part0 / MANIFEST).read_text())["files"])
    assert {"rng-rank0.pt", "rng-rank1.pt", "trainer_state.json", "scheduler.pt"} <= names
    assert not any(n.startswith(".rank-") for n in names)
    assert "rng-rank1.pt" not in {p.name for p in part0.iterdir()}  # never crossed nodes
    # rank 1's own shard file is on node 1 only, and the manifest names it
    only1 = {str(p.relative_to(part1)) for p in part1.rglob("*") if p.is_file()}
    assert only1 and only1 <= names
    assert not (only1 & {str(p.relative_to(part0)) for p in part0.rglob("*") if p.is_file()})

    # A partial upload (node 0's part only) is not a checkpoint.
    partial = tmp_path / "bucket-partial" / "checkpoint-3"
    shutil.copytree(part0, partial)
    assert verify_checkpoint(partial) is not None
    # The union of both parts is, and it loads on ONE rank (DCP reshards 2 -> 1).
    union = tmp_path / "bucket" / "checkpoint-3"
    shutil.copytree(part1, union)
    shutil.copytree(part0, union, dirs_exist_ok=True)
    assert verify_checkpoint(union) is None
    model = _model()
    engine, sched = _engine(model, distributed=False)
    state = load_checkpoint(union, engine, scheduler=sched)
    assert state["global_step"] == 3
    trained = torch.load(tmp_path / "trained.pt", weights_only=True)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, trained[name], rtol=0, atol=0)


@pytest.mark.slow
def test_shared_disk_still_one_publisher(tmp_path: Path) -> None:
    _train(tmp_path, shared=True)
    ckpt = tmp_path / "shared" / "checkpoint-3"
    assert verify_checkpoint(ckpt) is None
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == [
        "checkpoint-2",
        "checkpoint-3",
    ]


def _tokenize_main(rank: int, port: int, root: str, text: str) -> None:
    from tests.trainer_core.tc_helpers import MINILM
    from trainer_core.config import DataConfig, DataSource, ModelConfig
    from trainer_core.data import load_tokenized
    from trainer_core.model import build_tokenizer

    torch.set_num_threads(1)
    os.environ["LOCAL_RANK"] = "0"  # each rank alone on its "node"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        source = DataSource(path=text, format="text")
        cfg = DataConfig(train=source, text_field="text", max_length=16)
        tok = build_tokenizer(ModelConfig(name_or_path=MINILM, task="causal-lm"))
        node = Path(root) / f"node{rank}"  # the same cache path, on each node's own disk
        ds = load_tokenized(source, cfg, task="causal-lm", tokenizer=tok, cache_root=node)
        rows: list[Any] = [None, None]
        dist.all_gather_object(rows, ds["input_ids"])
        if rank == 0:
            assert rows[0] == rows[1] and rows[0], "the nodes tokenised differently"
        dist.barrier()
    finally:
        dist.destroy_process_group()
    leave()


@pytest.mark.slow
def test_tokenisation_cache_on_private_disks(tmp_path: Path) -> None:
    # Rank 0 tokenises into its node's cache; rank 1 cannot see it and builds its node's own.
    text = tmp_path / "tiny.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 20)
    args = (_free_port(), str(tmp_path), str(text))
    mp.start_processes(_tokenize_main, args=args, nprocs=2, start_method="spawn")
    for node in ("node0", "node1"):
        assert list((tmp_path / node).glob("*/dataset_info.json")), node
