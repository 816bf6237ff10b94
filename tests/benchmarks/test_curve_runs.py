"""Which run a capacity-curve cell reads when it is run more than once, and what its note says
(``benchmarks.bench_scale``)."""

from __future__ import annotations

import pytest

from benchmarks.bench_scale import (
    CURVE_SETTLE_S,
    GOAL_P99_MS,
    failed_note,
    median_run,
    near_the_goal,
    runs_note,
    told_note,
)

pytestmark = pytest.mark.unit


def run(p99_ms: float) -> tuple[dict, bool]:
    return {"p99_ms": p99_ms}, p99_ms < GOAL_P99_MS


def test_a_cell_well_within_the_goal_is_run_once_and_one_near_it_or_over_again():
    assert not near_the_goal(*run(0.49 * GOAL_P99_MS))
    assert near_the_goal(*run(0.5 * GOAL_P99_MS))     # a pass within half the goal of it: its chance too
    assert near_the_goal(*run(1.23 * GOAL_P99_MS))
    assert near_the_goal({"p99_ms": 5.0}, False)      # a fast cell that lost reports


def test_the_median_run_is_read_with_its_own_verdict_whichever_order_the_runs_came_in():
    runs = [run(123.0), run(65.0), run(98.0)]
    assert median_run(runs) == run(98.0)
    assert median_run(runs[::-1]) == run(98.0)
    assert median_run([run(65.0), run(123.0), run(140.0)]) == run(123.0)   # two of three over: missed
    assert median_run([run(12.0)]) == run(12.0)


def test_the_note_gives_every_run_s_p99_only_when_there_was_more_than_one():
    assert runs_note([run(12.0)]) == ""
    assert "p99s 123, 65, 98 ms" in runs_note([run(123.0), run(65.0), run(98.0)])


def test_the_note_says_whether_the_cell_had_settled_or_the_wait_for_it_ran_out():
    m = {"told_s": 14.0, "warmed_s": 94.2, "quiet_s": CURVE_SETTLE_S + 0.1}
    assert "measured from 94 s, once it had settled" in told_note(m)
    m["quiet_s"] = 3.4
    assert "the most the benchmark waits to settle: the last change, an interval told or a backoff, 3 s before" in (
        told_note(m))
    assert told_note({**m, "told_s": 1.0}) == ""   # never stretched: nothing to settle


def test_the_note_names_the_sends_that_failed_or_says_none_did():
    assert failed_note({"errors": {}}) == ", none failed"
    assert failed_note({"errors": {"TimeoutError": 3, "HTTP 503": 1}}) == ", failed: HTTP 503: 1, TimeoutError: 3"
