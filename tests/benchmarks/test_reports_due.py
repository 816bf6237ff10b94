"""How many reports a load window must see answered before the load rows say one was lost
(``benchmarks.bench_load.reports_due_floor``)."""

from __future__ import annotations

import math

import pytest

from benchmarks.bench_load import Sample, accepted_at_told, reports_due_floor

pytestmark = pytest.mark.unit


def cell(participants: int, told_s: float, duration_s: float = 8.0) -> dict:
    return {"participants": participants, "told_s": told_s, "duration_s": duration_s,
            "expected": participants * duration_s / told_s}


def test_a_report_a_second_leaves_no_room_for_chance():
    assert reports_due_floor(cell(1000, 1.0)) == pytest.approx(0.999 * 8000)


def test_a_told_interval_that_does_not_divide_the_window_leaves_three_standard_deviations_of_the_phases():
    # 1,000 participants told 6 s over 8 s: each sees 1 or 2 reports, 2 with chance 1/3 -> sd 14.9
    assert reports_due_floor(cell(1000, 6.0)) == pytest.approx(1000 * 8 / 6 - 3 * (1000 * 2 / 9) ** 0.5)
    # the 1,309 of 1,333 of one run passes; 1,260 does not
    assert 1260 < reports_due_floor(cell(1000, 6.0)) < 1309


def test_a_told_interval_that_divides_the_window_is_exact_again():
    assert reports_due_floor(cell(1000, 2.0)) == pytest.approx(0.999 * 4000)


def test_reports_sent_under_a_longer_interval_count_for_the_reports_of_the_median_one():
    # 300 participants over 8 s: 225 at the median 1 s (1,800 reports), 75 told 2 s (300): every one answered
    samples = [Sample(0.0, 0.01, None, 1.0)] * 1800 + [Sample(0.0, 0.01, None, 2.0)] * 300
    lost = [Sample(0.0, math.nan, "TimeoutError", 1.0)] * 10
    assert accepted_at_told(samples, 1.0) == 2400 >= reports_due_floor(cell(300, 1.0))
    assert accepted_at_told(samples[10:] + lost, 1.0) == 2390 < reports_due_floor(cell(300, 1.0))
