"""When a participant's next report comes: the interval told, the place in it, the backoff (pure: no clock)."""

import pytest

from collectors.config import MAX_INTERVAL_S, MIN_INTERVAL_S, backoff_cap_s
from collectors.report_schedule import SPREAD_FROM, ReportSchedule

pytestmark = pytest.mark.unit


def schedule(draw: float = 0.25) -> ReportSchedule:
    return ReportSchedule(1.0, backoff_cap_s, rng=lambda: draw)


def test_the_essays_worked_example() -> None:
    s = schedule()
    assert s.next_due(True, 10.0, 10.1) == 11.0                     # configured 1 s
    assert s.answered(4.0, None, 11.1)                               # told 4 s, no place: a change
    assert s.next_due(True, 11.0, 11.1) == 14.0                      # 4 x (0.5 + 0.25) after the due time
    assert s.next_due(True, 14.0, 14.1) == 18.0                      # then every 4 s
    # a failed round waits the backoff from the configured 1 s (the shorter), not from the 4 s told
    assert s.next_due(False, 18.0, 18.1) == pytest.approx(18.0 + 1.0 * (0.5 + 0.5 * 0.25))
    assert s.next_due(False, 18.625, 18.7) == pytest.approx(18.625 + 2.0 * (0.5 + 0.5 * 0.25))
    assert not s.answered(4.0, 5.3, 20.0)                            # the same interval, a place told
    assert s.next_due(True, 19.9, 20.0) == pytest.approx(25.3)
    assert s.backoff.failures == 0                                   # an answer ends the backoff


def test_a_place_told_replaces_the_random_spread_after_a_change() -> None:
    s = schedule(draw=0.9)
    assert s.answered(4.0, 2.5, 100.0)
    assert s.next_due(True, 99.9, 100.0) == 102.5                    # not 4 x 1.4 after it
    assert not s.answered(4.0, None, 103.0)                          # no place: the interval, unspread
    assert s.next_due(True, 103.0, 103.1) == 107.0


def test_a_place_or_an_interval_no_participant_may_have_is_not_followed() -> None:
    s = schedule()
    assert not s.answered(MAX_INTERVAL_S * 2, (1 + SPREAD_FROM) * MAX_INTERVAL_S + 1, 0.0)
    assert not s.answered(MIN_INTERVAL_S / 2, -1.0, 0.0)
    assert s.interval_s == 1.0 and s.told_due is None
    assert s.next_due(True, 0.0, 0.1) == 1.0


def test_a_round_that_ended_after_its_successor_was_due_is_followed_one_delay_after_it_ended() -> None:
    s = schedule()
    assert s.next_due(True, 10.0, 11.5) == 12.5                      # not a burst of rounds to catch up
    assert s.next_due(True, 10.0, 10.5) == 11.0
