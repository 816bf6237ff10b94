"""collectors.spends.SpendLog: what left a pool between two looks was spent, dated by its newest send or the look
that saw it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from collectors.spends import SpendLog
from protocol import MAX_SPENDS, GrantAsk

pytestmark = pytest.mark.unit


def test_what_left_the_pool_between_looks_is_a_spend_deposits_are_not() -> None:
    log = SpendLog()
    log.look("k", (100.0, None), 1.0)
    log.deposited("k", 50, 0)                     # the keeper's grant: not a spend
    log.look("k", (120.0, None), 1.02)            # 150 expected, 120 held: 30 spent
    log.look("k", (-20.0, None), 1.04)            # an acquire overdrew it: 140 spent
    spends = log.unsent("k", 1.05)
    assert [(round(s.ago_s, 3), s.msgs, s.bytes) for s in spends] == [(0.03, 30, 0), (0.01, 140, 0)]


def test_spends_stay_until_an_ask_carrying_them_is_answered() -> None:
    log = SpendLog()
    log.look("k", (100.0, 1000.0), 0.0)
    log.look("k", (90.0, 900.0), 0.1)
    assert len(log.unsent("k", 0.1)) == 1         # the ask failed: still there for the next one
    log.look("k", (80.0, 800.0), 0.2)
    assert [(s.msgs, s.bytes) for s in log.unsent("k", 0.2)] == [(10, 100), (10, 100)]
    log.answered("k")
    assert log.unsent("k", 0.3) == []


def test_the_oldest_spend_not_yet_carried_by_an_ask_dates_the_next_report() -> None:
    log = SpendLog()
    log.look("k", (100.0, None), 0.0)
    assert log.oldest_unsent_s("k") is None and log.oldest_unsent_s("other") is None
    log.look("k", (90.0, None), 0.1)
    log.look("k", (80.0, None), 0.2)
    assert log.oldest_unsent_s("k") == 0.1
    log.unsent("k", 0.25)                         # an ask carries both
    assert log.oldest_unsent_s("k") is None
    log.look("k", (70.0, None), 0.3)              # seen while the ask is out: the next one carries it
    assert log.oldest_unsent_s("k") == 0.3
    log.answered("k")
    assert log.oldest_unsent_s("k") == 0.3


def test_more_spends_than_an_ask_carries_are_merged_into_the_later_date() -> None:
    log = SpendLog(max_spends=3)
    log.look("k", (100.0, None), 0.0)
    for i in range(1, 6):
        log.look("k", (100.0 - i, None), 0.1 * i)
    spends = log.unsent("k", 0.5)
    assert len(spends) == 3 and sum(s.msgs for s in spends) == 5
    assert spends[0].msgs == 3 and spends[0].ago_s == pytest.approx(0.2)   # 0.1-0.3 s, dated 0.3 s


def test_forgotten_pools_start_again_from_their_next_look() -> None:
    log = SpendLog()
    log.look("k", (100.0, None), 0.0)
    log.forget([])
    log.look("k", (10.0, None), 0.1)
    assert log.unsent("k", 0.1) == []


def test_an_ask_carries_at_most_max_spends_and_says_so() -> None:
    spent = [{"ago_s": 0.01, "msgs": 1}] * (MAX_SPENDS + 1)
    with pytest.raises(ValidationError, match=f"at most {MAX_SPENDS}"):
        GrantAsk(level="topic", name="a/b/c", direction="publish", spent=spent)
    with pytest.raises(ValidationError, match="ago_s"):
        GrantAsk(level="topic", name="a/b/c", direction="publish", spent=[{"ago_s": -1, "msgs": 1}])
    with pytest.raises(ValidationError, match="held_msgs"):
        GrantAsk(level="topic", name="a/b/c", direction="publish", held_msgs="lots")


def test_a_spend_is_dated_at_the_pools_newest_send_and_the_ticks_lag_when_that_falls_between_two_looks() -> None:
    """The worked example of the module essay: a lump sent at 1.001-1.004 s is counted from 1.010 s, not from
    the look at 1.020 s that saw it."""
    log = SpendLog(lag_s=0.007)
    log.look("k", (200.0, None), 1.000)
    log.look("k", (75.0, None), 1.020, charged_s=1.003)
    assert log.oldest_unsent_s("k") == pytest.approx(1.010)


@pytest.mark.parametrize(("charged_s", "dated_s"), [
    (None, 1.02),     # unknown (a dispatch pool)
    (0.99, 1.02),     # older than the previous look (plus the lag): this spend came by a path that records none
    (1.015, 1.02),    # plus the lag, after this look: the look is the earlier of the two that are at or after it
])
def test_a_spend_is_dated_at_the_look_that_saw_it_when_the_newest_send_cannot_date_it(charged_s, dated_s) -> None:
    log = SpendLog(lag_s=0.007)
    log.look("k", (200.0, None), 1.000)
    log.look("k", (75.0, None), 1.020, charged_s=charged_s)
    assert log.oldest_unsent_s("k") == pytest.approx(dated_s)


def test_the_first_look_at_a_pool_dates_nothing_and_dates_stay_in_order() -> None:
    log = SpendLog(lag_s=0.007)
    log.look("k", (200.0, None), 1.000, charged_s=0.999)   # (the first look only learns the balance)
    assert log.oldest_unsent_s("k") is None
    log.look("k", (150.0, None), 1.020, charged_s=1.001)
    log.look("k", (100.0, None), 1.040, charged_s=1.019)   # 1.026: after the previous look
    assert [round(1.05 - s.ago_s, 3) for s in log.unsent("k", 1.05)] == [1.008, 1.026]


@pytest.mark.parametrize("lag_s", [-0.001, float("inf"), float("nan"), "7ms"])
def test_a_bad_lag_is_refused_with_what_is_allowed(lag_s) -> None:
    with pytest.raises(ValueError, match="lag_s must be a number of seconds >= 0"):
        SpendLog(lag_s=lag_s)
