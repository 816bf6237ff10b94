import threading
import time

import pytest

from limiter import ManualClock, SystemClock, ThreadScheduler, scheduler_for
from limiter.clock import PARK_AFTER_S, PARKED

pytestmark = pytest.mark.unit


def test_manual_clock_reads_and_advances():
    clock = ManualClock(start_s=100.0)
    assert clock.now_ns() == 100_000_000_000
    clock.advance(1.5)
    assert clock.now_ns() == 101_500_000_000
    assert clock.snapshot_ns() == clock.now_ns() == clock.tick_cell[0]
    assert clock.now_s() == pytest.approx(101.5)


def test_manual_clock_refuses_to_go_backwards():
    clock = ManualClock()
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="start_s"):
        ManualClock(start_s=-1)


def test_callbacks_run_in_due_order_each_at_its_own_time():
    clock = ManualClock()
    seen = []
    clock.call_later(0.3, lambda: seen.append(("c", clock.now_s())))
    clock.call_later(0.1, lambda: seen.append(("a", clock.now_s())))
    clock.call_later(0.1, lambda: seen.append(("b", clock.now_s())))
    cancelled = clock.call_later(0.2, lambda: seen.append(("x", clock.now_s())))
    cancelled.cancel()
    clock.advance(0.25)
    assert seen == [("a", 0.1), ("b", 0.1)]
    assert clock.now_s() == pytest.approx(0.25)
    clock.advance(1)
    assert seen[-1] == ("c", 0.3)
    assert clock.pending_timers() == 0


def test_callback_scheduled_by_a_callback_runs_within_the_same_advance():
    clock = ManualClock()
    seen = []
    clock.call_later(0.1, lambda: clock.call_later(0.1, lambda: seen.append(clock.now_s())))
    clock.advance(1)
    assert seen == [pytest.approx(0.2)]


def test_sleep_on_a_manual_clock_returns_when_the_test_advances():
    clock = ManualClock()
    woke = threading.Event()
    sleeper = threading.Thread(target=lambda: (clock.sleep(2.0), woke.set()))
    sleeper.start()
    clock.advance(1.0)
    assert not woke.wait(0.05)
    clock.advance(1.0)
    assert woke.wait(5)
    sleeper.join(5)


def test_system_clock_never_goes_backwards_and_ticks():
    clock = SystemClock()
    readings = [clock.now_ns() for _ in range(1000)]
    assert readings == sorted(readings)
    assert 0 < clock.snapshot_ns() <= clock.now_ns()
    assert clock.tick_cell[0] == PARKED or 0 < clock.tick_cell[0] <= clock.now_ns()   # (ticking, or parked)


def _within(holds, timeout_s: float, poll_s: float = 0.001) -> bool:
    """Whether ``holds()`` comes true within ``timeout_s`` of real time, polled every ``poll_s`` (the ticker's cell
    read directly, not through the clock, so the polling wakes nothing)."""
    deadline = time.monotonic() + timeout_s
    while not holds() and time.monotonic() < deadline:
        threading.Event().wait(poll_s)
    return holds()


def test_the_ticker_parks_when_no_one_reads_and_a_read_then_is_precise_and_wakes_it():
    """An idle process (a PySpark worker between tasks) wakes for nothing: after PARK_AFTER_S of ticking the
    thread parks, its cell says PARKED; a snapshot then reads the precise clock and wakes the thread, which ticks
    again (its cell a recent time), and parks again later."""
    clock = SystemClock()
    cell = clock.tick_cell
    assert _within(lambda: cell[0] == PARKED, 20 * PARK_AFTER_S)   # (it parks PARK_AFTER_S after it started)
    before = time.monotonic_ns()
    read = clock.snapshot_ns()
    assert before <= read <= clock.now_ns()                     # the precise clock, not the parked cell
    assert _within(lambda: cell[0] != PARKED, 5)                # the thread ticks again
    assert cell[0] >= before
    assert _within(lambda: cell[0] == PARKED, 20 * PARK_AFTER_S)


def test_a_forked_child_starts_parked_and_its_first_read_starts_its_own_ticker():
    """PySpark forks its Python workers from a daemon that may have ticked: the parent's last tick would read as
    the child's time, and the parent's thread does not exist in the child."""
    import os

    clock = SystemClock()
    cell = clock.tick_cell   # (the parent ticks; a bucket made before the fork holds this same list)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: report, then leave without running the parent's exit handlers
        try:
            parked = cell[0] == PARKED
            precise = clock.snapshot_ns() <= clock.now_ns()
            ticks = _within(lambda: cell[0] != PARKED, 5)
            os.write(write_end, b"".join(b"1" if ok else b"0" for ok in (parked, precise, ticks)))
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 3)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"111", answer   # parked at the fork, a precise first read, then its own ticks


def test_a_bucket_reads_through_a_parked_tick():
    """The hot path's tick read falls back to the clock's snapshot where the cell is parked (0): a charge made then is
    dated at the clock's time, not at 0."""
    from limiter import AsyncTokenBucket

    clock = ManualClock(start_s=5.0)
    bucket = AsyncTokenBucket(rate=100, period_s=1.0, capacity=100, clock=clock)
    clock.tick_cell[0] = PARKED
    bucket.consume_and_check(5)
    assert bucket.charged_ns == clock.now_ns() == 5_000_000_000


def test_thread_scheduler_runs_callbacks_and_survives_a_failing_one():
    scheduler = ThreadScheduler()
    done = threading.Event()
    errors = []
    original = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_type)
    try:
        scheduler.call_later(0, lambda: 1 / 0)
        scheduler.call_later(0.01, done.set)
        assert done.wait(5)
    finally:
        threading.excepthook = original
    assert errors == [ZeroDivisionError]


def test_a_timer_thousands_of_years_away_does_not_kill_the_timer_thread():
    """A pool's own refill is near zero (deposits fill it): the time until its deficit refills by itself can be
    1e11 s, past the platform's time_t. The thread must keep serving every other timer."""
    scheduler = ThreadScheduler()
    scheduler.call_later(1e11, lambda: None)
    done = threading.Event()
    scheduler.call_later(0.01, done.set)
    assert done.wait(5)
    again = threading.Event()
    scheduler.call_later(0.01, again.set)      # and after it had to wait for the far one
    assert again.wait(5)


def test_scheduler_for_picks_the_manual_clock_itself():
    clock = ManualClock()
    assert scheduler_for(clock) is clock
    assert isinstance(scheduler_for(SystemClock()), ThreadScheduler)
