"""controlplane.ask_pace: a process's budget of grant asks, shared out between the limits asked for tokens."""

from __future__ import annotations

import math

import pytest

from controlplane.ask_pace import ACTIVE_S, ASKS_BUDGET_PER_S, RECOUNT_S, AskPace
from protocol import MAX_ASKS_PER_S

pytestmark = pytest.mark.unit


def busy(pace: AskPace, limits: int, now: float) -> None:
    for i in range(limits):
        pace.asked(f"topic:publish:t{i}", now)


def test_up_to_twenty_busy_limits_each_is_asked_its_hundred_a_second():
    pace = AskPace()
    assert pace.budget_per_s == ASKS_BUDGET_PER_S == 2000
    assert pace.per_limit_per_s(0.0) == MAX_ASKS_PER_S              # nothing asked yet
    busy(pace, 20, 1.0)
    assert pace.active(1.0) == 20 and pace.per_limit_per_s(1.0) == 100


def test_more_busy_limits_share_the_budget():
    pace = AskPace(2000)
    busy(pace, 50, 1.0)
    assert pace.per_limit_per_s(1.0) == 40                          # 50 limits of 20 participants: 2 asks each
    busy(pace, 1000, 1.05)                                          # counted again only after RECOUNT_S
    assert pace.per_limit_per_s(1.05) == 40
    assert pace.per_limit_per_s(1.0 + RECOUNT_S) == 2


def test_a_limit_no_longer_asked_gives_its_part_back_after_active_s():
    pace = AskPace(2000)
    busy(pace, 50, 1.0)
    pace.asked("topic:publish:t0", 1.5)
    assert pace.per_limit_per_s(1.0 + ACTIVE_S + 0.01) == 100       # one limit left in the last second
    assert pace.active(1.5 + ACTIVE_S + RECOUNT_S) == 0


def test_a_clock_that_goes_back_recounts_rather_than_keeping_a_stale_count():
    pace = AskPace(2000)
    busy(pace, 50, 10.0)
    assert pace.active(10.0) == 50
    assert pace.active(5.0) == 50                                   # recounted at 5.0: all asked "later" stay


@pytest.mark.parametrize("bad", [50, 0, -1, math.nan, math.inf, True, "2000", None])
def test_a_budget_below_one_limits_pace_or_not_a_number_is_refused(bad):
    with pytest.raises(ValueError, match=r"budget_per_s must be .*asks a second.*got"):
        AskPace(bad)
