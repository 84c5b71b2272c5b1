"""How the torch engines' DCP checkpoints meet files: written small-first, read by fetching.

``FetchingReader`` (a checkpoint not all on this node, ``trainer_core.fetch``) is DCP's own
``FileSystemReader`` on the checkpoint's local directory, except that before it opens a file
it fetches what it is about to read: the metadata file whole, then, per shard file, the byte
ranges of the items in this rank's load plan. The plan is the truth about what a rank reads:
its own shard at the world size that wrote it; slices of several shards when the world size
changed; the one copy of a replicated tensor (DDP parameters, TP-replicated norms, optimizer
step counts) that DCP stored in some other rank's file. A rank never fetches a block of a
file it does not read from.

``SmallFirstWriter`` is DCP's ``FileSystemWriter`` writing each rank's tensors smallest first,
as DCP's own loader already does for GPU tensors (``_OverlappingCpuLoader``) but not on CPU.
The small items (step counts, norms) are what other ranks come for, so they sit together in
a block or two at the head of a file instead of one per block between large shards.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.futures import Future

from trainer_core.fetch import CheckpointFiles

__all__ = ["FetchingReader", "SmallFirstWriter"]


class FetchingReader(FileSystemReader):
    def __init__(self, files: CheckpointFiles) -> None:
        super().__init__(files.path)
        self._files = files

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # The global ".metadata", or (DCP's fallback) this rank's "__<rank>.metadata".
        path = self._get_metadata_path(kwargs.get("rank"))
        self._files.fetch(os.path.relpath(path, self._files.path))
        return super().read_metadata(*args, **kwargs)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        ranges: dict[str, list[tuple[int, int]]] = {}
        for item in plan.items:
            stored = self.storage_data[item.storage_index]
            ranges.setdefault(stored.relative_path, []).append((stored.offset, stored.length))
        for rel, wanted in sorted(ranges.items()):
            self._files.fetch(rel, wanted)
        return super().read_data(plan, planner)


class SmallFirstWriter(FileSystemWriter):
    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[Any]:
        items = sorted(plan.items, key=lambda item: item.tensor_storage_size() or 0)
        return super().write_data(dataclasses.replace(plan, items=items), planner)
