"""The loop's wait, measured: the p99 of the wait a report arriving at a random moment would have, from how late a
timer's wake-ups come."""

from __future__ import annotations

import asyncio
import time

import pytest

from controlplane.loop_lag import LoopLag, p99_wait_s

pytestmark = pytest.mark.unit


def test_one_long_hold_in_a_window_is_the_wait_of_every_report_that_arrived_during_it() -> None:
    # the module essay's example: 0.5 s held in a window of 5 s -- 9 % of the window's arrivals waited over 0.45 s
    assert p99_wait_s([0.5] + [0.0] * 499, 5.0) == pytest.approx(0.45)
    # the 1 % of the time is found across several lags: 3 x (0.03 - x) + (0.02 - x) = 0.05 at x = 0.015
    assert p99_wait_s([0.03, 0.03, 0.03, 0.02, 0.001], 5.0) == pytest.approx(0.015)
    # lags that sum to less than 1 % of the window: no arrival in a hundred waits
    assert p99_wait_s([0.01, 0.02], 5.0) == 0.0 and p99_wait_s([], 5.0) == 0.0


def test_a_window_without_wake_ups_is_not_measured_and_each_take_starts_a_new_window() -> None:
    lag = LoopLag()
    assert lag.take(5.0) is None
    lag.observe(0.5)
    lag.observe(-0.001)   # (a wake-up a hair early counts as on time)
    assert lag.take(5.0) == pytest.approx(0.45)
    assert lag.take(5.0) is None


def test_the_probe_on_a_real_loop_sees_the_loop_held() -> None:
    lag = LoopLag(period_s=0.005)

    async def held() -> None:
        probe = asyncio.create_task(lag.run())
        await asyncio.sleep(0.02)        # a few wake-ups on time
        time.sleep(0.08)                 # the loop held, as a slow report holds it
        await asyncio.sleep(0.02)
        probe.cancel()

    asyncio.run(held())
    # the hold began after a wake-up and lasted 80 ms: the timer due in it came at least 75 ms late
    assert lag.take(1.0) >= 0.065


@pytest.mark.parametrize("period_s", [0.0, -1.0, 2.0, float("nan"), "0.01", True])
def test_a_bad_period_says_what_is_allowed(period_s: object) -> None:
    with pytest.raises(ValueError, match=r"period_s must be a number of seconds > 0 and <= 1, got "):
        LoopLag(period_s=period_s)  # type: ignore[arg-type]
