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


def test_the_busy_share_is_the_process_cpu_over_each_whole_second() -> None:
    cpu = [0.0]
    lag = LoopLag(cpu_clock=lambda: cpu[0], busy_window_s=1.0)
    lag.sample_cpu(100.0)                  # the first sample starts the first second
    assert lag.busy_share == 0.0
    cpu[0] = 0.5
    lag.sample_cpu(100.5)
    assert lag.busy_share == 0.0           # half a second: not yet
    cpu[0] = 0.95
    lag.sample_cpu(101.0)
    assert lag.busy_share == pytest.approx(0.95)
    cpu[0] = 1.05                          # the next second: 0.1 s of CPU in 1.25 s
    lag.sample_cpu(102.25)
    assert lag.busy_share == pytest.approx(0.1 / 1.25)


def test_the_probe_on_a_real_loop_sees_the_core_busy_though_no_wake_up_is_late() -> None:
    lag = LoopLag(period_s=0.002, busy_window_s=0.2)

    async def spinning() -> None:   # the loop gives the probe its turn every 1 ms, and spins in between
        probe = asyncio.create_task(lag.run())
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            spun = time.monotonic() + 0.001
            while time.monotonic() < spun:
                pass
            await asyncio.sleep(0)
        probe.cancel()

    asyncio.run(spinning())
    assert lag.busy_share > 0.5 and lag.last_s < 0.2   # (wide: a shared CI core gives the process less)


@pytest.mark.parametrize("period_s", [0.0, -1.0, 2.0, float("nan"), "0.01", True])
def test_a_bad_period_says_what_is_allowed(period_s: object) -> None:
    with pytest.raises(ValueError, match=r"period_s must be a number of seconds > 0 and <= 1, got "):
        LoopLag(period_s=period_s)  # type: ignore[arg-type]


def test_a_bad_busy_window_says_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"busy_window_s must be"):
        LoopLag(busy_window_s=0.0)
