"""An elastic run's data order (``trainer_core.row_order``): per step the same rows at every
width of the range, across epoch boundaries whose row count is not a multiple of the global
batch, and a resume from any step's position on any width reads exactly the rows the
fixed-width run reads next. Pure index arithmetic (no model): the loss side (a step's loss
normalised by the global target count, so the same rows give the same loss at any width)
is held by ``test_elastic_resume.py``."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from types import SimpleNamespace
from typing import cast

import numpy as np
import pytest

from trainer_core.data import BatchOrder
from trainer_core.loop import _rebase
from trainer_core.row_order import RowOrder, elastic_order
from trainer_core.run_state import State
from trainer_core.streaming import ShardedDataset, StreamOrder

N = 62  # rows: not a multiple of the global batch (24), nor of 4 or 3 ranks
BATCH = 2  # per device
MAX, ACCUM_AT_MAX = 4, 3  # {min: 2, max: 4}: widths 2 (accum 6), 3 (4), 4 (3)
RANGE = SimpleNamespace(min=2, max=4)
GLOBAL = BATCH * ACCUM_AT_MAX * MAX  # 24 rows per step
STEPS = 12  # 288 rows: 4.6 epochs of 62


def _accum(width: int) -> int:
    return ACCUM_AT_MAX * MAX // width


def _orders(width: int, epochs: int | None = None) -> list[RowOrder]:
    return [
        elastic_order(
            BatchOrder(N, batch_size=BATCH, seed=5, dp_rank=r, dp_size=width),
            RANGE,
            accumulation=_accum(width),
        )
        for r in range(width)
    ]


def _steps(
    width: int, position: tuple[int, int] = (0, 0), epochs: int | None = None
) -> Iterator[tuple[list[int], tuple[int, int], list[int]]]:
    """Per step: its rows (all ranks), the position after it (as the loop's ``_advance``
    keeps it) and each rank's row count."""
    streams = [o.iterate(*position, epochs) for o in _orders(width, epochs)]
    while True:
        windows = [list(islice(s, _accum(width))) for s in streams]
        if not windows[0]:
            return
        rows = sorted(i for w in windows for _, _, ix in w for i in ix)
        epoch, last, _ = windows[0][-1]
        yield rows, (epoch, last + 1), [sum(len(ix) for _, _, ix in w) for w in windows]


def _fixed(width: int) -> list[tuple[list[int], tuple[int, int], list[int]]]:
    return list(islice(_steps(width), STEPS))


def test_every_width_reads_the_same_rows_per_step_across_epoch_ends() -> None:
    at4, at3, at2 = _fixed(4), _fixed(3), _fixed(2)
    assert [s[0] for s in at4] == [s[0] for s in at3] == [s[0] for s in at2]
    assert all(len(rows) == GLOBAL for rows, _, _ in at4)
    # the steps cross four epoch ends, none of them at a step boundary (62 % 24 != 0)
    assert [pos[0] for _, pos, _ in at4] == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4]
    assert all(
        counts == [GLOBAL // w] * w
        for w, run in ((4, at4), (3, at3), (2, at2))
        for _, _, counts in run
    )
    # step 3 holds epoch 0's last 14 rows and epoch 1's first 10: rows of both permutations
    perm0, perm1 = (BatchOrder(N, batch_size=BATCH, seed=5).samples(e) for e in (0, 1))
    assert at4[2][0] == sorted([*perm0[48:], *perm1[:10]])


@pytest.mark.parametrize(("saved", "resumed"), [(4, 2), (2, 4), (4, 3), (3, 2), (2, 3)])
def test_a_resume_on_another_width_reads_the_fixed_runs_next_rows(saved: int, resumed: int) -> None:
    fixed = _fixed(saved)
    for k in range(1, STEPS):  # a checkpoint after every step, past each epoch end too
        state = State(epoch=fixed[k - 1][1][0], batch=fixed[k - 1][1][1], rows_per_batch=1)
        _rebase(state, 1)  # the loop's rebase: rows stay rows on every width
        got = list(islice(_steps(resumed, (state.epoch, state.batch)), STEPS - k))
        assert [s[0] for s in got] == [s[0] for s in fixed[k:]], (saved, resumed, k)


def test_the_first_epoch_is_batch_orders() -> None:
    """Within epoch 0 a rank's micro-batches are ``BatchOrder``'s (before its short last)."""
    for width in (2, 3, 4):
        for rank, order in enumerate(_orders(width)):
            want = BatchOrder(N, batch_size=BATCH, seed=5, dp_rank=rank, dp_size=width).epoch(0)
            full = N // (BATCH * width)
            got = [ix for _, _, ix in islice(order.iterate(0, 0, None), full)]
            assert got == want[:full]


def test_an_epoch_capped_stream_ends_alike_at_every_width() -> None:
    """Two epochs (124 rows): five whole steps, then 4 rows; the last step is cut to a
    multiple of lcm(2, 3, 4) = 12 rows, which leaves none, so every width stops after step
    5 (a run of ``ceil(2 x 62 / 24) = 6`` steps ends with the stream, as a fractional window
    does today). Three epochs: seven steps and 18 rows, cut to 12, 3 on each of 4 ranks,
    in micro-batches of 8 and 4 at width 4 and of 6 and 6 at width 3."""
    runs = {w: list(_steps(w, epochs=2)) for w in (2, 3, 4)}
    assert {len(r) for r in runs.values()} == {5}
    assert [s[0] for s in runs[4]] == [s[0] for s in runs[2]] == [s[0] for s in runs[3]]
    cut = list(_steps(4, epochs=3))  # 186 rows: 7 steps and 18 rows, cut to 12
    assert [len(rows) for rows, _, _ in cut] == [GLOBAL] * 7 + [12]
    assert [c for _, _, c in cut][-1] == [3, 3, 3, 3]
    assert [s[0] for s in cut] == [s[0] for s in _steps(3, epochs=3)]


def test_the_rebase_from_a_batch_position_is_exact_at_any_width() -> None:
    """A checkpoint from before this order (a batch index of 4 x 2 rows) is a row position."""
    state = State(epoch=0, batch=3, rows_per_batch=8)
    _rebase(state, RowOrder.unit)
    assert (state.batch, state.rows_per_batch) == (24, 1)
    with pytest.raises(RuntimeError, match="exact data position"):
        _rebase(State(epoch=1, batch=3, rows_per_batch=1), 8)  # rows into a rigid run's batches


class _Shards:
    """What ``StreamOrder.over`` reads of a ``ShardedDataset``: 62 rows in 9 shards, shuffled
    in windows of 2; ``plan`` records each epoch's shard order as the stream enters it."""

    shard_rows = [7, 7, 7, 7, 7, 7, 7, 7, 6]
    window = 2

    def __init__(self) -> None:
        self.plans: list[list[int]] = []

    def plan(self, shards: list[int]) -> None:
        self.plans.append(shards)


def test_a_streamed_dataset_reads_the_same_rows_per_step() -> None:
    """The row stream over ``StreamOrder``'s shard-block shuffle: same rows per step at every
    width, in the epochs' sample order, and the dataset gets each epoch's shard plan as the
    stream enters it."""
    shards = {w: _Shards() for w in (2, 3, 4)}

    def steps(width: int) -> list[list[int]]:
        ds = cast(ShardedDataset, shards[width])
        orders = [
            elastic_order(
                StreamOrder.over(ds, batch_size=BATCH, seed=3, dp_rank=r, dp_size=width),
                RANGE,
                accumulation=_accum(width),
            )
            for r in range(width)
        ]
        streams = [o.iterate(0, 0, None) for o in orders]
        out = []
        for _ in range(STEPS):
            windows = [list(islice(s, _accum(width))) for s in streams]
            out.append(sorted(i for w in windows for _, _, ix in w for i in ix))
        return out

    at4 = steps(4)
    assert at4 == steps(2) == steps(3)
    order = StreamOrder.over(cast(ShardedDataset, _Shards()), batch_size=BATCH, seed=3)
    # each rank plans epochs 0..4 as its stream enters them, in step with the others
    assert shards[4].plans == [order.shards(e) for e in range(5) for _ in range(4)]
    seq = np.concatenate([order.samples(e) for e in range(5)])
    assert at4 == [sorted(seq[k * GLOBAL : (k + 1) * GLOBAL].tolist()) for k in range(STEPS)]


def test_batch_order_alone_reads_other_rows_per_width_past_an_epoch_end() -> None:
    """What the row stream fixes: with each width's ``BatchOrder`` (a rigid job's order) the
    steps agree until epoch 0's short last micro-batches (step 3), then widths 4 and 2 read
    other rows in 4 of the 12 steps."""

    def steps(width: int) -> list[list[int]]:
        orders = [
            BatchOrder(N, batch_size=BATCH, seed=5, dp_rank=r, dp_size=width) for r in range(width)
        ]
        streams = [o.iterate(0, 0, None) for o in orders]
        out = []
        for _ in range(STEPS):
            windows = [list(islice(s, _accum(width))) for s in streams]
            out.append(sorted(i for w in windows for _, _, ix in w for i in ix))
        return out

    at4, at2 = steps(4), steps(2)
    same = [a == b for a, b in zip(at4, at2, strict=True)]
    assert same[:3] == [True, True, False] and same.count(False) == 4, same
