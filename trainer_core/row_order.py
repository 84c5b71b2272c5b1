"""``RowOrder``: an elastic job's data order (``shunter.jobspec.elastic``), the same rows per
step at every width, across epoch boundaries too.

``BatchOrder`` and ``StreamOrder`` cut each epoch into this width's micro-batches (the last
one short) and drop ``n % dp_size`` rows, so past the first epoch end whose row count is
not a multiple of the global batch two widths read different rows per step, and a data
position saved as a batch index on one width may fall inside a batch of another. Here the
epochs' sample sequences (the same permutations: ``BatchOrder.samples``,
``StreamOrder.samples``) are read as one row stream: a micro-batch is the next
``batch_size x dp_size`` rows of it (across an epoch end when it comes), rank ``r`` takes
every ``dp_size``-th row from ``r``, nothing is dropped. A step of ``accumulation``
micro-batches is then the next ``batch_size x dp_size x accumulation`` rows, the global
batch, whatever the width, and the data position is a row (``unit`` = 1): a resume on any
width starts at exactly the next row. Within the first epoch the batches are
``BatchOrder``'s. Only the stream's very end (an epoch-capped run) may leave a short step:
it is cut to a multiple of ``align`` rows (the least common multiple of the range's widths,
so at every width it is the same rows and each rank gets as many), none if that leaves none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from trainer_core.data import BatchOrder
from trainer_core.stream_read import StreamOrder

__all__ = ["RowOrder", "elastic_order"]


def elastic_order(order: BatchOrder | StreamOrder, widths: Any, *, accumulation: int) -> RowOrder:
    """``order``'s epochs read as a ``RowOrder`` (same seed, same permutations), aligned for
    every width in ``widths`` (the attempt's ``resources.elastic_from``: ``min``, ``max``);
    ``accumulation``: micro-batches per step at this width."""
    if isinstance(order, BatchOrder) and order.lengths is not None:
        raise ValueError("group_by_length cuts batches per width: not for an elastic run")
    align = math.lcm(*range(widths.min, widths.max + 1))
    on_epoch = None
    if isinstance(order, StreamOrder) and order.data is not None:
        data = order.data
        on_epoch = lambda epoch: data.plan(order.shards(epoch))  # noqa: E731
    return RowOrder(
        order.samples,
        order.num_examples,
        batch_size=order.batch_size,
        dp_rank=order.dp_rank,
        dp_size=order.dp_size,
        step_rows=order.batch_size * order.dp_size * accumulation,
        align=align,
        on_epoch=on_epoch,
    )


class RowOrder:
    """The row stream of ``epoch_rows(epoch)`` (each a permutation of ``num_examples``
    rows), cut into micro-batches of ``batch_size x dp_size`` rows. ``on_epoch(epoch)`` is
    called as the stream enters an epoch (a streamed dataset's shard plan)."""

    unit = 1  # rows per data position (``BatchOrder``, ``StreamOrder``: a batch of each rank)

    def __init__(
        self,
        epoch_rows: Callable[[int], np.ndarray],
        num_examples: int,
        *,
        batch_size: int,
        dp_rank: int,
        dp_size: int,
        step_rows: int,
        align: int,
        on_epoch: Callable[[int], None] | None = None,
    ) -> None:
        if align % dp_size:
            raise ValueError(f"align {align} is not a multiple of {dp_size} ranks")
        self.epoch_rows, self.num_examples = epoch_rows, num_examples
        self.batch_size, self.dp_rank, self.dp_size = batch_size, dp_rank, dp_size
        self.step_rows, self.align, self.on_epoch = step_rows, align, on_epoch

    def __len__(self) -> int:
        return self.num_examples  # data positions per epoch: rows

    def iterate(
        self, start_epoch: int, start_row: int, num_epochs: int | None
    ) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, row, this rank's indices) of each micro-batch from the given position,
        (epoch, row) being the position of its last row; endless if no epoch cap."""
        n, micro = self.num_examples, self.batch_size * self.dp_size
        at = start_epoch * n + start_row  # a global row position: epoch x n + row
        end = None if num_epochs is None else num_epochs * n
        if end is not None:  # the last, short step: a multiple of ``align`` rows, or none
            end -= end % self.step_rows % self.align
        cached: dict[int, np.ndarray] = {}
        while end is None or at < end:
            stop = at + micro if end is None else min(at + micro, end)
            rows = self._rows(at, stop, cached)
            epoch, row = divmod(stop - 1, n)
            yield epoch, row, rows[self.dp_rank :: self.dp_size].tolist()
            at = stop

    def _rows(self, start: int, stop: int, cached: dict[int, np.ndarray]) -> np.ndarray:
        """Global rows ``start`` .. ``stop`` of the stream (``cached``: the epochs read)."""
        n, parts = self.num_examples, []
        while start < stop:
            epoch, row = divmod(start, n)
            if epoch not in cached:
                cached.clear()  # one epoch at a time: the stream only moves on
                if self.on_epoch is not None:
                    self.on_epoch(epoch)
                cached[epoch] = np.asarray(self.epoch_rows(epoch))
            take = cached[epoch][row : row + stop - start]
            parts.append(take)
            start += len(take)
        return np.concatenate(parts)
