"""Resume from object storage (a real local S3 server) with every rank reading through its
own node's cache: each node fetches only the bytes its ranks read, and the resume is exact.

- FSDP2, 2 ranks, through trainer_core's own checkpoints (each rank saves on its own "node";
  the bucket holds the union): resumed on two fresh nodes, rank 1's node never fetches rank
  0's shard nor its RNG file; rank 0's fetches only the blocks of rank 1's shard that hold
  the tensors DCP stored there once for both (optimizer step counts, ...). Steps 3-4 and
  the final weights equal the uninterrupted run's bit for bit. Each node holds exactly the
  blocks that hold what its rank's load read.
- DDP, TP, FSDP2 and DeepSpeed ZeRO-1/2/3 (the strategy harness): resumed from the bucket,
  steps 3-4 equal the uninterrupted run's; a ZeRO rank's node fetches its own partition
  (and, ZeRO-1/2, the shared model states), never the other rank's.
- A checkpoint written by 4 ranks (FSDP+TP 2x2) resumes on 2 (FSDP) from the bucket: DCP
  reshards, each node fetching about half.
- Within the attempt that wrote it (a divergence rollback, the load-best at the end), each
  node's staging holds only its own part: the ranks find and load the checkpoint through
  ``RayReporter.checkpoint_files``' view of the bucket's copy, exactly.

Manifests here hash 4 KiB blocks (4 MiB in jobs) so the tiny model's shards span many.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from s3_server import S3Server, aws_env, running_s3

import storage
from tests.trainer_core.test_strategies_harness import GLOBAL_BATCH, Job, batch_for, leave, spawn
from trainer_core.parallel import ParallelConfig
from worker.checkpoint_callback import verify_stored
from worker.node_cache import CachedCheckpoint

pytestmark = pytest.mark.slow

BLOCK = 4096
TOL = 1e-4  # another world size: the sums run in another order
FSDP = ParallelConfig(strategy="fsdp")
_TWO: dict[str, ParallelConfig] = {
    "ddp": ParallelConfig(strategy="ddp"),
    "tp": ParallelConfig(strategy="tp", tensor_parallel_size=2),
    "fsdp": FSDP,
    "zero1": ParallelConfig(strategy="deepspeed", deepspeed_stage=1),
    "zero2": ParallelConfig(strategy="deepspeed", deepspeed_stage=2),
    "zero3": ParallelConfig(strategy="deepspeed", deepspeed_stage=3),
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture(scope="module")
def bucket(s3: S3Server) -> str:
    return "s3://" + s3.bucket("r-" + secrets.token_hex(4))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bucket-resume")


def _whole(uri: str) -> dict[str, int]:
    files = json.loads(storage.read_bytes(storage.join(uri, "manifest.json")))["files"]
    return {rel: int(meta["size"]) for rel, meta in files.items()}


# ------------------------------------------------ FSDP2 through trainer_core's checkpoints


def _steps(engine: Any, first: int, last: int) -> list[float]:
    losses = []
    for step in range(first, last + 1):
        rows = GLOBAL_BATCH // engine.dp_size
        mine = batch_for(step, Job(name="", cfg=FSDP))[engine.dp_rank * rows :][:rows]
        loss = engine.forward(input_ids=mine, labels=mine).loss
        engine.backward(loss)
        engine.clip_and_step(1.0)
        losses.append(engine.reduce_sum(loss.detach()).item() / engine.dp_size)
    return losses


class _Recording:
    """A rank's ``CheckpointFiles``, noting what it asked for: (file, ranges or None)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.path = inner, inner.path
        self.reads: list[tuple[str, list[tuple[int, int]] | None]] = []

    def fetch(self, rel: str, ranges: Any = None) -> Path:
        self.reads.append((rel, None if ranges is None else [tuple(r) for r in ranges]))
        return Path(self.inner.fetch(rel, ranges))

    def problem(self) -> str | None:
        return self.inner.problem()  # type: ignore[no-any-return]


def _blocks_read(reads: list[Any], whole: dict[str, int]) -> dict[str, int]:
    """Bytes of the BLOCK-sized blocks that hold what a rank read, per file."""
    blocks: dict[str, set[int]] = {}
    for rel, ranges in reads:
        count = -(-whole[rel] // BLOCK) or 1
        spans = [(0, whole[rel])] if ranges is None else ranges
        for offset, length in spans:
            last = (offset + length - 1) // BLOCK if length else offset // BLOCK
            blocks.setdefault(rel, set()).update(range(offset // BLOCK, min(last, count - 1) + 1))
    return {
        rel: sum(min(BLOCK, whole[rel] - i * BLOCK) for i in ids) or whole[rel]
        for rel, ids in blocks.items()
    }


def _fsdp_rank(rank: int, port: int, work: str, uri: str, phase: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK="0",  # each rank alone on its node
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    from transformers import LlamaConfig, LlamaForCausalLM

    from storage import manifest
    from tests.trainer_core.test_strategies_harness import LR, TINY_LLAMA
    from trainer_core.checkpoint import load_checkpoint, save_checkpoint
    from trainer_core.parallel import build_engine, init_distributed
    from worker.staging import cached, localize

    manifest.BLOCK_SIZE = BLOCK  # the per-file table's default block (storage.manifest's own)
    info = init_distributed(use_cuda=False)
    try:
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA))
        engine = build_engine(
            model,
            FSDP,
            make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=LR),
            device=info.device,
        )
        sched = torch.optim.lr_scheduler.LambdaLR(engine.optimizer, lambda s: 1.0)
        root = Path(work)
        if phase == "save":  # each rank on its own node; the test uploads both parts
            losses = _steps(engine, 1, 2)
            state = {"global_step": 2}
            save_checkpoint(root / f"node{rank}", 2, engine, scheduler=sched, trainer_state=state)
            losses += _steps(engine, 3, 4)
        elif phase == "rollback":  # the same nodes, later in the attempt that saved
            from trainer_core.checkpoint import latest_verified
            from trainer_core.resume_from import readable_checkpoint as _readable
            from worker.ray_reporter import RayReporter

            stage = root / f"node{rank}"  # this node's staging: its own part of checkpoint-2
            reporter = RayReporter(rank=rank, sender=None, resume_from=None, upload=True,
                                   storage_uri=uri.rsplit("/", 1)[0], staging=stage)  # fmt: skip
            if rank == 0:  # rank 0 chooses the rollback target: not without the bucket
                assert latest_verified(stage) is None
                assert latest_verified(stage, reporter.checkpoint_files) == stage / "checkpoint-2"
            directory, files = _readable(reporter, stage / "checkpoint-2")
            assert files is not None and directory == stage / ".bucket" / "checkpoint-2"
            saved = load_checkpoint(directory, engine, scheduler=sched, files=files)
            assert saved["global_step"] == 2
            losses = [float("nan")] * 2 + _steps(engine, 3, 4)
        else:  # two fresh nodes, each with only the manifest at first
            node = root / ("hosts-rank1" if rank == 1 else "hosts-rank0")
            path = localize(uri, node, local_rank=0)
            files = _Recording(cached(path))
            saved = load_checkpoint(path, engine, scheduler=sched, files=files)
            assert saved["global_step"] == 2
            (root / f"reads-rank{rank}.json").write_text(json.dumps(files.reads))
            losses = [float("nan")] * 2 + _steps(engine, 3, 4)
        full = engine.full_state_dict()
        if rank == 0:
            torch.save({"losses": losses, "state": full}, root / f"{phase}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    leave()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(phase: str, work: Path, uri: str) -> None:
    args = (_free_port(), str(work), uri, phase)
    mp.start_processes(_fsdp_rank, args=args, nprocs=2, start_method="spawn")


def test_fsdp_resume_fetches_what_each_rank_reads_and_is_exact(bucket: str, work: Path) -> None:
    root = work / "fsdp-trainer-core"
    uri = f"{bucket}/job/checkpoint-2"
    _run("save", root, uri)
    for node in ("node0", "node1"):  # Ray Train's per-node upload: the parts merge
        storage.upload_dir(root / node / "checkpoint-2", uri)
    assert verify_stored(uri) is None
    _run("resume", root, uri)
    _run("rollback", root, uri)

    saved = torch.load(root / "save.pt", weights_only=True)
    for phase in ("resume", "rollback"):
        resumed = torch.load(root / f"{phase}.pt", weights_only=True)
        assert resumed["losses"][2:] == saved["losses"][2:], phase  # bit for bit
        for name, value in saved["state"].items():
            torch.testing.assert_close(resumed["state"][name], value, rtol=0, atol=0)

    whole = _whole(uri)
    reads = {r: json.loads((root / f"reads-rank{r}.json").read_text()) for r in (0, 1)}
    for rank in (0, 1):  # a node holds exactly the blocks its rank read, nothing more
        fetched = CachedCheckpoint(uri, root / f"hosts-rank{rank}" / "checkpoint-2").fetched()
        assert fetched == _blocks_read(reads[rank], whole), rank
        assert sum(fetched.values()) < 0.65 * sum(whole.values()), (rank, fetched)
    read1 = {rel for rel, _ in reads[1]}
    # Rank 1 reads its own shard and nothing of rank 0's: DCP stored every replicated
    # tensor of this model in rank 1's file (its plan was the smaller when they were placed).
    assert read1 == {
        ".metadata",
        "__1_0.distcp",
        "rng-rank1.pt",
        "scheduler.pt",
        "trainer_state.json",
    }
    # ... so rank 0 reads those few tensors from rank 1's file, and nothing else of it.
    from_1 = [length for rel, ranges in reads[0] if rel == "__1_0.distcp" for _, length in ranges]
    assert 0 < sum(from_1) < whole["__1_0.distcp"] // 5
    # Written small-first (SmallFirstWriter), they lie together: one run of blocks.
    fetched0 = CachedCheckpoint(uri, root / "hosts-rank0" / "checkpoint-2").fetched()
    assert fetched0["__1_0.distcp"] <= sum(from_1) + 2 * BLOCK
    assert "rng-rank1.pt" not in {rel for rel, _ in reads[0]}


# ------------------------------------------------ every strategy, through the harness


@pytest.fixture(scope="module")
def two_process(bucket: str, work: Path) -> dict[str, Any]:
    saves, resumes = [], []
    for name, cfg in _TWO.items():
        uri = f"{bucket}/ckpt-{name}"
        saves.append(
            Job(
                name=name,
                cfg=cfg,
                save_after=2,
                save_dir=str(work / f"ckpt-{name}"),
                upload_to=uri,
                block_size=BLOCK,
            )
        )
        cache = str(work / "node{rank}")  # each rank on its own node
        resumes.append(Job(name=f"resume-{name}", cfg=cfg, first=3, load_from=uri, load_via=cache))
    return spawn(2, saves, work, then=resumes)


@pytest.mark.parametrize("name", list(_TWO))
def test_resume_from_the_bucket_equals_the_uninterrupted_run(
    name: str, two_process: dict[str, Any]
) -> None:
    resumed, saved = two_process[f"resume-{name}"], two_process[name]
    assert resumed["losses"] == saved["losses"][2:], (name, resumed, saved)
    assert resumed["norms"] == saved["norms"][2:], name


@pytest.mark.parametrize("name", ["zero1", "zero2", "zero3"])
def test_a_zero_rank_fetches_only_its_partition(
    name: str, two_process: dict[str, Any], bucket: str
) -> None:
    whole = _whole(f"{bucket}/ckpt-{name}")
    for rank, fetched in enumerate(two_process[f"resume-{name}"]["fetched"]):
        mine = {rel for rel in whole if f"zero_pp_rank_{rank}_" in rel}
        shared = set() if name == "zero3" else {"deepspeed/mp_rank_00_model_states.pt"}
        assert mine and shared <= whole.keys()
        assert fetched == {rel: whole[rel] for rel in mine | shared}, (rank, fetched)


def test_sharded_strategies_fetch_part_of_the_checkpoint(
    two_process: dict[str, Any], bucket: str
) -> None:
    for name in ("fsdp", "zero3"):  # fully sharded (TP replicates norms and more)
        total = sum(_whole(f"{bucket}/ckpt-{name}").values())
        for fetched in two_process[f"resume-{name}"]["fetched"]:
            assert sum(fetched.values()) < 0.7 * total, (name, fetched)


# ------------------------------------------------ another world size: 4 ranks -> 2


def test_dcp_resume_4_to_2_ranks_from_the_bucket(bucket: str, work: Path) -> None:
    uri = f"{bucket}/ckpt-fsdp+tp-4"
    saved = spawn(
        4,
        [
            Job(
                name="fsdp+tp-2x2",
                cfg=ParallelConfig(strategy="fsdp+tp", tensor_parallel_size=2),
                save_after=2,
                save_dir=str(work / "ckpt-fsdp+tp-4"),
                upload_to=uri,
                block_size=BLOCK,
            )
        ],
        work,
    )["fsdp+tp-2x2"]
    cache = str(work / "4to2-node{rank}")
    job = Job(name="resume-4to2", cfg=FSDP, first=3, load_from=uri, load_via=cache)
    resumed = spawn(2, [job], work)["resume-4to2"]
    assert len(resumed["losses"]) == 2
    for got, want in zip(
        resumed["losses"] + resumed["norms"], saved["losses"][2:] + saved["norms"][2:], strict=True
    ):
        assert abs(got - want) <= TOL, (resumed, saved)
    whole = _whole(uri)
    for fetched in resumed["fetched"]:  # each of the 2 ranks reads about half of it
        assert sum(fetched.values()) < 0.7 * sum(whole.values()), fetched
    for rel in (rel for rel in whole if rel.endswith(".distcp")):  # and all of it is read
        assert sum(node.get(rel, 0) for node in resumed["fetched"]) >= whole[rel], rel
