"""benchmarks.shared.micro_batches: Spark's micro-batches and its gaps between them, from the tasks' spans."""

from __future__ import annotations

import pytest

from benchmarks.shared.micro_batches import APART_S, gaps_s, micro_batches

pytestmark = pytest.mark.unit


def test_one_cores_two_tasks_are_one_micro_batch_and_sparks_gap_is_between_them() -> None:
    """The two applications' stream on one core: two tasks 30 ms apart a micro-batch, 0.4 s between micro-batches."""
    spans = []
    for k in range(4):
        start = 1.5 * k
        spans += [(start, start + 0.1), (start + 0.13, start + 1.1)]
    assert micro_batches(reversed(spans)) == [(1.5 * k, 1.5 * k + 1.1, 2) for k in range(4)]
    assert gaps_s(spans, 0.0, 10.0) == pytest.approx([0.4, 0.4, 0.4])
    assert gaps_s(spans, 2.0, 10.0) == pytest.approx([0.4, 0.4])   # (micro-batches that start in the span only)


def test_overlapping_tasks_are_one_micro_batch_until_all_have_ended() -> None:
    """Sixteen workers' tasks overlap; the next micro-batch starts after the last of them ended, not the first."""
    first = [(0.01 * i, 0.05 + 0.02 * i) for i in range(16)]        # the last ends at 0.35
    second = [(0.35 + APART_S + 0.01 + 0.01 * i, 1.0) for i in range(16)]
    got = micro_batches(first + second)
    assert [(tasks, round(end, 3)) for _, end, tasks in got] == [(16, 0.35), (16, 1.0)]
    assert gaps_s(first + second, 0.0, 2.0) == pytest.approx([APART_S + 0.01])


def test_a_batch_jobs_tasks_back_to_back_are_one_group_and_have_no_gap() -> None:
    spans = [(0.05 * i, 0.05 * i + 0.049) for i in range(64)]
    assert micro_batches(spans) == [(0.0, pytest.approx(63 * 0.05 + 0.049), 64)]
    assert gaps_s(spans, 0.0, 10.0) == [] and micro_batches([]) == []
