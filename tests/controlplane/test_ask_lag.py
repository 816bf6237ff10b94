"""AskLag: each participant's spends dated by its own clock, so an ask delayed on its way counts them no later."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.ask_lag import EPOCH_S, MAX_EXCESS_S, MOST_DELAY_SUMMED_S, AskLag
from controlplane.grants import GrantBook
from limiter import ManualClock
from limiter.grants import HELD_SLACK
from protocol import GrantAsk, GrantRequest, PolicySet, ResourceGroup, Spend

pytestmark = pytest.mark.unit

LIMIT = 1000.0
POLICIES = PolicySet(version=1, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=LIMIT)})


def test_an_ask_later_than_its_participants_quickest_says_by_how_much() -> None:
    lag = AskLag()
    # the participant's clock started 1,000 s after ours; its first ask took 1.2 ms on the way
    assert lag.excess_s("a", sent_s=0.0, now=1000.0012) == 0.0
    assert lag.excess_s("a", sent_s=1.0, now=1001.0412) == pytest.approx(0.040)   # 40 ms later than that
    assert lag.excess_s("a", sent_s=2.0, now=1002.0002) == 0.0                    # a quicker one: the new least
    assert lag.excess_s("a", sent_s=3.0, now=1003.0012) == pytest.approx(0.001)
    # every participant has its own clock
    assert lag.excess_s("b", sent_s=5.0, now=1003.5) == 0.0
    assert lag.excess_s("b", sent_s=5.0, now=1003.6) == pytest.approx(0.1)


def test_an_ask_that_does_not_say_when_it_was_sent_is_dated_by_its_arrival() -> None:
    assert AskLag().excess_s("a", sent_s=None, now=5.0) == 0.0


def test_a_participant_moves_its_own_spends_by_no_more_than_the_cap() -> None:
    lag = AskLag()
    lag.excess_s("a", sent_s=1e9, now=1.0)   # a clock far ahead once (a bug): the least lag is hugely negative
    assert lag.excess_s("a", sent_s=2.0, now=2.0) == MAX_EXCESS_S


def test_the_least_is_read_afresh_every_two_epochs_so_a_drifting_clock_is_followed() -> None:
    lag = AskLag(epoch_s=10.0)
    assert lag.excess_s("a", sent_s=0.0, now=0.001) == 0.0
    assert lag.excess_s("a", sent_s=9.0, now=9.003) == pytest.approx(0.002)
    # its clock drifted 2 ms behind ours: within two epochs the old least is still there...
    assert lag.excess_s("a", sent_s=12.0, now=12.003) == pytest.approx(0.002)
    # ... after them it is gone, and the new least is 3 ms
    assert lag.excess_s("a", sent_s=25.0, now=25.003) == pytest.approx(0.0)
    assert lag.excess_s("a", sent_s=26.0, now=26.004) == pytest.approx(0.001)
    assert len(lag) == 1
    lag.excess_s("b", sent_s=0.0, now=27.0)
    lag.excess_s("b", sent_s=0.0, now=47.0)
    lag.excess_s("b", sent_s=0.0, now=58.0)   # two epochs on: a (silent since 26 s) is forgotten
    assert len(lag) == 1


@pytest.mark.parametrize("epoch_s, max_excess_s", [(0.0, 0.5), (float("inf"), 0.5), (10.0, -1.0),
                                                   (10.0, float("nan"))])
def test_bad_settings_say_what_is_allowed(epoch_s: float, max_excess_s: float) -> None:
    with pytest.raises(ValueError, match="epoch_s must be > 0 and max_excess_s >= 0"):
        AskLag(epoch_s, max_excess_s)


def test_the_default_epochs_follow_a_drift_of_100_ppm_within_a_few_milliseconds() -> None:
    assert 2 * EPOCH_S * 100e-6 <= 0.002


def _spent_room_after_a_late_lump(tmp_path: Path, says_when_sent: bool) -> float:
    """``a`` spends the whole limit at 10 ms in one lump; the ask that says so is 40 ms on its way. At 1.02 s
    ``b`` asks for 100 (within its fair chunk): what it is granted."""
    clock = ManualClock()
    book = GrantBook(1.0, tmp_path, clock=clock.now_s)
    t0 = clock.now_s()
    offset = 1000.0   # a's clock against ours

    def a_asks(at: float, sent_at: float, spent: list[Spend]) -> None:
        clock.advance(t0 + at - clock.now_s())
        request = GrantRequest(participant_id="a", sent_s=offset + sent_at if says_when_sent else None,
                               asks=[GrantAsk(level="resource_group", name="rg", direction="publish",
                                              wants_msgs=1, rate_msgs_per_s=LIMIT, held_msgs=0.0, spent=spent)])
        book.answer(request.participant_id, request.asks, POLICIES, request.sent_s)

    a_asks(0.0, 0.0, [])                                        # on its way in no time
    a_asks(0.05, 0.01, [Spend(ago_s=0.0, msgs=LIMIT)])          # sent at 10 ms, with the lump just spent
    clock.advance(t0 + 1.02 - clock.now_s())
    return book.answer("b", [GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=100,
                                      rate_msgs_per_s=LIMIT, held_msgs=0.0)], POLICIES)[0].msgs


def test_a_late_asks_spends_are_dated_when_they_were_spent_not_when_the_ask_arrived(tmp_path: Path) -> None:
    # dated by a's clock the lump slid out at 1.01 s: b gets its ask; dated by the arrival it counts until
    # 1.05 s, and b gets only the slack beside it
    assert _spent_room_after_a_late_lump(tmp_path / "sent", says_when_sent=True) == 100
    assert _spent_room_after_a_late_lump(tmp_path / "arrival", says_when_sent=False) == pytest.approx(
        HELD_SLACK * LIMIT)


def test_a_clock_far_off_counts_in_the_top_bucket_without_swamping_the_delays_sum() -> None:
    lag = AskLag()
    lag.excess_s("a", sent_s=1e9, now=1.0)
    lag.excess_s("a", sent_s=2.0, now=2.0)          # 1e9 s "late" against that first ask
    buckets, total = lag.delays()
    assert buckets[-1] == (float("inf"), 2) and buckets[-2][1] == 1
    assert total == MOST_DELAY_SUMMED_S
