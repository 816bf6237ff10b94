"""How many reports a load window must see answered before the load rows say one was lost
(``benchmarks.bench_load.reports_due_floor``)."""

from __future__ import annotations

import pytest

from benchmarks.bench_load import reports_due_floor

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
