"""The benchmark's measure of how long each kind waited for the limiter (``benchmarks.shared.kinds.slice_waits``),
and the peers' charging of a batch (``_charged``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.shared.kinds import _charged, _Pacer, slice_waits

pytestmark = pytest.mark.unit


class Batch:
    def __init__(self, num_rows: int, first: int = 0):
        self.num_rows, self.first = num_rows, first

    def slice(self, offset: int, length: int) -> Batch:
        return Batch(length, self.first + offset)


def test_a_slice_waits_for_its_own_acquire_not_for_spark_taking_the_slices_before_it() -> None:
    now = [100.0]
    acquire_s = [0.0, 0.002, 0.0, 0.030]      # what each slice's acquire waits (two slices a batch)

    def helper(batches: Iterator[Any]) -> Iterator[Any]:
        waits = iter(acquire_s)
        for batch in batches:
            for _ in range(2):
                now[0] += next(waits)
                yield Batch(batch.num_rows // 2)

    got = []
    for sliced, waited_s, batch in slice_waits(helper, iter([Batch(100), Batch(100)]), _Pacer(0),
                                               now_s=lambda: now[0]):
        got.append((sliced.num_rows, round(waited_s, 6), batch))
        now[0] += 0.5      # Spark takes the slice: not the limiter's time
    # (each slice says which batch it was cut from: a paced task's batch waited the sum of its slices' waits)
    assert got == [(50, 0.0, 0), (50, 0.002, 0), (50, 0.0, 1), (50, 0.03, 1)]


def test_a_batchs_first_slice_waits_from_its_hand_over_not_through_the_pacers_sleep() -> None:
    now = [100.0]

    class Pacer(_Pacer):
        def before(self, rows: int) -> None:
            now[0] += 0.25    # the source's own pace: not the limiter's time

    def helper(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            now[0] += 0.004
            yield batch

    waits = [round(w, 6) for _, w, _ in slice_waits(helper, iter([Batch(10), Batch(10)]), Pacer(0),
                                                    now_s=lambda: now[0])]
    assert waits == [0.004, 0.004]


def test_the_first_slice_waits_for_the_helpers_setup_too() -> None:
    now = [100.0]

    def helper(batches: Iterator[Any]) -> Iterator[Any]:
        now[0] += 0.006     # its producer (a round trip, if it waits for its pools' first grant there)
        for batch in batches:
            now[0] += 0.001
            yield batch

    waits = [round(w, 6) for _, w, _ in slice_waits(helper, iter([Batch(10), Batch(10)]), _Pacer(0),
                                                    now_s=lambda: now[0])]
    assert waits == [0.007, 0.001]


@pytest.mark.parametrize(("most", "slices"), [
    (None, [(0, 100), (0, 10)]),                      # redis, static: each batch whole
    (25, [(0, 25), (25, 25), (50, 25), (75, 25), (0, 10)]),   # redis-sliced: ours' sends, a batch under them whole
    (40, [(0, 40), (40, 40), (80, 20), (0, 10)]),
])
def test_the_peers_charge_each_batch_whole_or_in_ours_slices_each_acquired_before_it_goes_on(
        most: int | None, slices: list[tuple[int, int]]) -> None:
    acquired: list[int] = []
    passed = []
    for b in _charged(acquired.append, most)(iter([Batch(100), Batch(10), Batch(0)])):
        passed.append((b.first, b.num_rows))
        assert sum(acquired) == sum(n for _, n in passed)   # (acquired before it was passed on, not after)
    assert passed == [*slices, (0, 0)]                      # an empty batch goes on, charging nothing
    assert acquired == [n for _, n in slices]
