"""Reading a streamed dataset (``trainer_core.streaming``'s reader): ``ShardedDataset`` fetches
shards through the node cache as batches need them (the next window ahead, in a background
thread), and ``StreamOrder`` is the deterministic, resumable shard-block shuffle."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from trainer_core.stream_shards import FORMAT_VERSION

__all__ = ["ShardedDataset", "StreamOrder"]

log = logging.getLogger("trainer_core.streaming")


class ShardedDataset:
    """The rows of a sharded dataset, read shard by shard.

    ``fetch(name)``: the local path of shard file ``name`` (through the node cache, pinned);
    ``release(name)``: unpin it (the cache may evict it). ``ds[indices]`` → ``{column: [values
    in indices' order]}``, like ``datasets.Dataset``. ``plan(shards)`` (``StreamOrder``) gives
    the epoch's shard order in windows: reading a window fetches the next one ahead and
    releases the windows behind. Without a plan, at most ``keep`` shards stay open.

    ``budget``: bytes this reader may hold pinned in the node cache (half its cap: the rest
    is for the model and other jobs). The next window is fetched ahead only when it fits
    beside what is held; a reader holds at most the one or two windows a batch spans and the
    one ahead, so a cap of 6 x ``window`` x shard bytes always leaves room to prefetch, and
    one of 4 x is needed to stay under it at all (a smaller one is logged)."""

    def __init__(
        self,
        index: dict[str, Any],
        *,
        fetch: Callable[[str], Path],
        release: Callable[[str], None],
        keep: int = 4,
        budget: int | None = None,
    ) -> None:
        if int(index.get("version", 0)) != FORMAT_VERSION:
            raise ValueError(f"streaming index version {index.get('version')!r} is not readable")
        self.index = index
        self.shard_rows = [int(n) for n in index["rows"]]
        self.shard_bytes = [int(n) for n in index["bytes"]]
        self.window = int(index["window"])
        self.budget = budget
        if budget is not None:
            need = 2 * self.window * max(self.shard_bytes)
            if need > budget:
                log.warning(
                    "a batch may span two windows of %d shards (%d bytes): more than the %d "
                    "bytes of node cache this reader should hold; the cache goes past its cap",
                    self.window,
                    need,
                    budget,
                )
        self.column_names = list(index.get("columns") or [])
        self._starts = np.concatenate([[0], np.cumsum(self.shard_rows)]).astype(np.int64)
        self._fetch, self._release, self._keep = fetch, release, keep
        self._open: dict[int, pa.Table] = {}  # shard -> table, in order of use
        self._ahead: dict[int, Future[Path]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
        self._lock = threading.Lock()
        self._windows: list[list[int]] | None = None
        self._window_of: dict[int, int] = {}
        self.max_open = 0  # most shards held at once (tests, bench)

    def __len__(self) -> int:
        return int(self._starts[-1])

    @staticmethod
    def name(shard: int) -> str:
        return f"shard-{shard:05d}.arrow"

    def plan(self, shards: list[int]) -> None:
        """This epoch's shard order: windows of ``window`` shards, read in turn."""
        self._windows = [shards[i : i + self.window] for i in range(0, len(shards), self.window)]
        self._window_of = {s: w for w, ws in enumerate(self._windows) for s in ws}

    def __getitem__(self, indices: int | list[int]) -> dict[str, Any]:
        if isinstance(indices, int):
            return {k: v[0] for k, v in self[[indices]].items()}
        where = np.asarray(indices, dtype=np.int64)
        if where.size and (where.min() < 0 or where.max() >= len(self)):
            raise IndexError(f"row index out of range 0..{len(self) - 1}")
        shard_of = np.searchsorted(self._starts, where, side="right") - 1
        needed = sorted(set(shard_of.tolist()))
        self._follow(needed)
        out: dict[str, list[Any]] = {name: [None] * len(indices) for name in self.column_names}
        for shard in needed:
            positions = np.nonzero(shard_of == shard)[0]
            local = where[positions] - self._starts[shard]
            part = self._table(shard).take(pa.array(local)).to_pydict()
            for name, values in part.items():
                column = out.setdefault(name, [None] * len(indices))
                for pos, value in zip(positions.tolist(), values, strict=True):
                    column[pos] = value
        return out

    def close(self) -> None:
        """Release every shard (the end of a run)."""
        self._pool.shutdown(wait=True)
        for shard in list(self._ahead):
            self._drop(shard)
        for shard in list(self._open):
            self._drop(shard)

    def _follow(self, needed: list[int]) -> None:
        """Release what the plan has passed, fetch the next window ahead."""
        if self._windows is None or not all(s in self._window_of for s in needed):
            return
        first = min(self._window_of[s] for s in needed)
        last = max(self._window_of[s] for s in needed)
        held = set(self._open) | set(self._ahead)
        for shard in held:
            w = self._window_of.get(shard)
            if w is None or w < first:
                self._drop(shard)
        if last + 1 < len(self._windows):
            ahead = [s for s in self._windows[last + 1] if s not in self._open]
            ahead = [s for s in ahead if s not in self._ahead]
            kept = set(self._open) | set(self._ahead) | set(needed)
            pinned = sum(self.shard_bytes[s] for s in kept | set(ahead))
            if self.budget is not None and pinned > self.budget:
                return  # no room ahead: fetched when read
            for shard in ahead:
                self._ahead[shard] = self._pool.submit(self._fetch, self.name(shard))

    def _table(self, shard: int) -> pa.Table:
        table = self._open.pop(shard, None)
        if table is None:
            ahead = self._ahead.pop(shard, None)
            path = ahead.result() if ahead is not None else self._fetch(self.name(shard))
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_file(source).read_all()
            if self._windows is None:
                while len(self._open) >= self._keep:
                    self._drop(next(iter(self._open)))
        self._open[shard] = table  # most recently used last
        self.max_open = max(self.max_open, len(self._open) + len(self._ahead))
        return table

    def _drop(self, shard: int) -> None:
        ahead = self._ahead.pop(shard, None)
        if ahead is not None:
            with contextlib.suppress(Exception):  # a failed prefetch is retried when read
                ahead.result()  # let the fetch finish before unpinning what it pins
        self._open.pop(shard, None)
        self._release(self.name(shard))


class StreamOrder:
    """Deterministic, resumable, data-parallel batch order over a sharded dataset.

    Each epoch: a generator seeded ``seed + epoch`` permutes the shards, then, window by
    window (``window`` shards in the permuted order), permutes the samples of the window's
    shards together; the epoch's sequence is those windows in turn. As in ``BatchOrder``: the
    last ``n % dp_size`` samples are dropped, rank ``dp_rank`` takes every ``dp_size``-th
    sample from its rank, and the rank's samples are cut into batches (the last may be short).
    A rank reads at most two windows at a time. ``data`` (the dataset) gets each epoch's shard
    order (``ShardedDataset.plan``) as iteration enters it."""

    def __init__(
        self,
        shard_rows: list[int],
        *,
        window: int,
        batch_size: int,
        seed: int,
        dp_rank: int = 0,
        dp_size: int = 1,
        data: ShardedDataset | None = None,
    ) -> None:
        self.shard_rows = [int(n) for n in shard_rows]
        self.num_examples = sum(self.shard_rows)
        if self.num_examples < dp_size:
            raise ValueError(f"{self.num_examples} training examples cannot feed {dp_size} ranks")
        self.window, self.batch_size, self.seed = max(1, window), batch_size, seed
        self.dp_rank, self.dp_size, self.data = dp_rank, dp_size, data
        self._starts = np.concatenate([[0], np.cumsum(self.shard_rows)]).astype(np.int64)

    @classmethod
    def over(
        cls, ds: ShardedDataset, *, batch_size: int, seed: int, dp_rank: int = 0, dp_size: int = 1
    ) -> StreamOrder:
        return cls(
            ds.shard_rows,
            window=ds.window,
            batch_size=batch_size,
            seed=seed,
            dp_rank=dp_rank,
            dp_size=dp_size,
            data=ds,
        )

    def __len__(self) -> int:
        per_rank = self.num_examples // self.dp_size
        return -(-per_rank // self.batch_size)

    def shards(self, epoch: int) -> list[int]:
        """The epoch's shard order."""
        gen = torch.Generator().manual_seed(self.seed + epoch)
        return [int(s) for s in torch.randperm(len(self.shard_rows), generator=gen)]

    def samples(self, epoch: int) -> np.ndarray:
        """The epoch's whole sample sequence (before data-parallel striding)."""
        gen = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(len(self.shard_rows), generator=gen).numpy()
        parts = []
        for w in range(0, len(order), self.window):
            ids = np.concatenate(
                [
                    np.arange(self._starts[s], self._starts[s + 1])
                    for s in order[w : w + self.window]
                ]
            )
            parts.append(ids[torch.randperm(len(ids), generator=gen).numpy()])
        return np.concatenate(parts)

    def epoch(self, epoch: int) -> list[list[int]]:
        seq = self.samples(epoch)
        usable = self.num_examples - self.num_examples % self.dp_size
        mine = seq[self.dp_rank : usable : self.dp_size].tolist()
        return [mine[i : i + self.batch_size] for i in range(0, len(mine), self.batch_size)]

    def iterate(
        self, start_epoch: int, start_batch: int, num_epochs: int | None
    ) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, batch index, indices) from the given position; endless if no epoch cap."""
        epoch, first = start_epoch, start_batch
        while num_epochs is None or epoch < num_epochs:
            if self.data is not None:
                self.data.plan(self.shards(epoch))
            for b, indices in enumerate(self.epoch(epoch)[first:], start=first):
                yield epoch, b, indices
            epoch, first = epoch + 1, 0
