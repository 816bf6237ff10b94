import io
import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.clock import ManualClock
from limiter.offload import OffloadThrottle, ThrottledReader, throttled_chunks

pytestmark = pytest.mark.unit


def test_worked_example_from_the_module_essay(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    ticket = t.before_read()
    assert (ticket.delay_s, ticket.estimate_bytes) == (0, 0)
    t.after_read(ticket, 600)
    clock.advance(0.1)
    ticket = t.before_read()
    assert (ticket.delay_s, ticket.estimate_bytes) == (0, 600)
    t.after_read(ticket, 700)
    assert t.average_entry_bytes() == 650
    clock.advance(0.1)
    assert t.before_read().delay_s == pytest.approx(0.8)
    clock.advance(0.1)
    assert t.before_read().delay_s == pytest.approx(0.7)
    clock.advance(0.1)
    assert t.calculate_delay_s() == pytest.approx(1.6)
    assert t.before_read().delay_s == pytest.approx(1.6)
    stats = t.snapshot()
    assert stats.reads_limited == 3 and stats.reads_total == 2 and stats.bytes_total == 1300
    clock.advance(0.6)  # t = 1.0: window 0 ended; 3250 - 1000 = 2250 still charged: windows 1 and 2 are full
    assert t.calculate_delay_s() == pytest.approx(2.0)


def test_calculate_delay_reserves_nothing(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    t.after_read(t.before_read(estimate_bytes=0), 1000)
    assert t.calculate_delay_s() == pytest.approx(1.0)
    assert t.calculate_delay_s() == pytest.approx(1.0)
    assert t.snapshot().reads_limited == 0


def test_limit_off_never_delays_but_still_counts(clock):
    for off in (0, -1):
        t = OffloadThrottle(bytes_per_s=off, clock=clock)
        for _ in range(5):
            ticket = t.before_read(estimate_bytes=10**9)
            assert ticket.delay_s == 0
            t.after_read(ticket, 10**9)
        stats = t.snapshot()
        assert stats.reads_limited == 0 and stats.bytes_total == 5 * 10**9 and stats.reading_max_bytes == 5 * 10**9


def test_one_read_bigger_than_the_permits_runs_and_is_carried_not_blocking_forever(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    first = t.before_read(estimate_bytes=10_000)  # ten windows' worth, in a fresh window: at once
    assert first.delay_s == 0
    t.after_read(first, 10_000)
    second = t.before_read(estimate_bytes=10_000)
    assert second.delay_s == pytest.approx(10.0)  # waits for the first one's bytes, never for its own
    clock.advance(second.delay_s)
    t.after_read(second, 10_000)
    assert t.calculate_delay_s() == pytest.approx(10.0)


def test_delayed_reads_reserve_their_place_instead_of_rushing_the_next_window(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    t.after_read(t.before_read(estimate_bytes=0), 1000)
    delays = [t.before_read(estimate_bytes=500).delay_s for _ in range(4)]
    assert delays == [pytest.approx(1.0), pytest.approx(1.0), pytest.approx(2.0), pytest.approx(2.0)]


def test_actual_bytes_replace_the_estimate(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    ticket = t.before_read(estimate_bytes=5000)
    assert t.calculate_delay_s() == pytest.approx(5.0)
    t.after_read(ticket, 100)  # far less than estimated: the rest is given back
    assert t.calculate_delay_s() == 0


def test_failed_and_cancelled_reads_give_the_estimate_back(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    ticket = t.before_read(estimate_bytes=3000)
    t.read_failed(ticket)
    assert t.calculate_delay_s() == 0 and t.snapshot().errors == 1
    t.cancel_read(t.before_read(estimate_bytes=3000))
    stats = t.snapshot()
    assert t.calculate_delay_s() == 0 and stats.errors == 1 and stats.reads_total == 0


def test_live_change_of_the_limit_applies_to_the_next_decision(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    t.after_read(t.before_read(estimate_bytes=0), 1500)
    assert t.calculate_delay_s() == pytest.approx(1.0)
    t.bytes_per_s = 2000
    assert t.calculate_delay_s() == 0
    t.bytes_per_s = 500
    assert t.calculate_delay_s() == pytest.approx(3.0)
    t.bytes_per_s = 0
    assert t.calculate_delay_s() == 0
    assert t.bytes_per_s == 0


def test_metrics_max_window_bytes_rate_and_offload_time(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    for size in (400, 500):
        t.after_read(t.before_read(), size)
    clock.advance(1.0)
    ticket = t.before_read()
    clock.advance(0.25)  # the read itself takes 0.25 s
    t.after_read(ticket, 300)
    stats = t.snapshot()
    assert stats.reading_max_bytes == 900 and stats.window_bytes == 300
    assert stats.offload_rate_bytes_per_s == 900
    assert stats.offload_time_s == pytest.approx(0.25)
    clock.advance(2.0)  # an idle window in between: the last complete window read nothing
    assert t.snapshot().offload_rate_bytes_per_s == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, "1000", True, None])
def test_bad_limit_is_rejected(clock, bad):
    with pytest.raises(ValueError, match="bytes_per_s must be a finite number"):
        OffloadThrottle(bytes_per_s=bad, clock=clock)
    t = OffloadThrottle(bytes_per_s=10, clock=clock)
    with pytest.raises(ValueError):
        t.bytes_per_s = bad
    assert t.bytes_per_s == 10


def test_other_bad_input_is_rejected(clock):
    with pytest.raises(ValueError, match="window_s"):
        OffloadThrottle(1000, window_s=0, clock=clock)
    t = OffloadThrottle(1000, clock=clock)
    with pytest.raises(ValueError, match="entries"):
        t.before_read(-1)
    with pytest.raises(ValueError, match="estimate_bytes"):
        t.before_read(estimate_bytes=math.nan)
    with pytest.raises(ValueError, match="actual_bytes"):
        t.after_read(t.before_read(), -5)


def test_throttled_reader_delays_reads_and_keeps_the_data(clock):
    data = bytes(range(256)) * 40  # 10240 bytes
    t = OffloadThrottle(bytes_per_s=2048, clock=clock)
    start = clock.now_s()
    with ThrottledReader(io.BytesIO(data), t, sleep=clock.advance) as reader:
        chunks = []
        while chunk := reader.read(1024):
            chunks.append(chunk)
        assert reader.tell() == len(data)  # delegated
    assert b"".join(chunks) == data
    elapsed = clock.now_s() - start
    assert 4.0 <= elapsed <= 5.0  # 10 KiB at 2 KiB/s: the last window opens at t = 4
    stats = t.snapshot()
    assert stats.bytes_total == len(data) and stats.reads_limited >= 4
    assert stats.reading_max_bytes <= 2048 + 1024


def test_throttled_reader_readinto_and_errors(clock):
    t = OffloadThrottle(bytes_per_s=100, clock=clock)
    reader = ThrottledReader(io.BytesIO(b"x" * 300), t, sleep=clock.advance)
    buffer = bytearray(150)
    assert reader.readinto(buffer) == 150 and reader.readinto(buffer) == 150
    assert clock.now_s() == pytest.approx(101.0)  # second read waited for window 1 (150 >= 100)

    class Broken(io.RawIOBase):
        def readinto(self, b):
            raise OSError("disk gone")

    broken = ThrottledReader(Broken(), t, sleep=clock.advance)
    with pytest.raises(OSError, match="disk gone"):
        broken.read(10)
    assert t.snapshot().errors == 1


def test_throttled_chunks_pulls_each_chunk_only_when_admitted(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)
    pulled_at = []

    def source():
        for i in range(6):
            pulled_at.append(clock.now_s() - 100)
            yield bytes([i]) * 500

    out = list(throttled_chunks(source(), t, sleep=clock.advance))
    assert [len(c) for c in out] == [500] * 6
    assert pulled_at == [0, 0, 1, 1, 2, 2]
    stats = t.snapshot()
    assert stats.reads_total == 6 and stats.reads_limited == 3  # the pull that found the end waited too
    assert clock.now_s() == pytest.approx(103.0)
    t.bytes_per_s = 500  # 500 still charged would fill the window now
    assert t.calculate_delay_s() == 0  # the end of the stream gave its 500-byte estimate back


def test_throttled_chunks_counts_an_error_from_the_source(clock):
    t = OffloadThrottle(bytes_per_s=1000, clock=clock)

    def source():
        yield b"a" * 10
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError, match="source failed"):
        list(throttled_chunks(source(), t, sleep=clock.advance))
    assert t.snapshot().errors == 1 and t.snapshot().reads_total == 1


def test_reader_waits_on_the_manual_clock_by_default(clock):
    t = OffloadThrottle(bytes_per_s=100, clock=clock)
    t.after_read(t.before_read(), 100)
    got = []
    worker = threading.Thread(target=lambda: got.append(ThrottledReader(io.BytesIO(b"abc"), t).read()))
    worker.start()
    for _ in range(100):
        if not worker.is_alive():
            break
        clock.advance(0.5)
        worker.join(0.01)
    worker.join(5)
    assert got == [b"abc"]


def test_concurrent_reads_are_charged_exactly_once(clock):
    t = OffloadThrottle(bytes_per_s=10**12, clock=clock)

    def worker():
        for _ in range(500):
            t.after_read(t.before_read(estimate_bytes=7), 3)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stats = t.snapshot()
    assert stats.reads_total == 4000 and stats.bytes_total == 12_000 and stats.window_bytes == 12_000
    t.bytes_per_s = 12_000  # everything charged is exactly the actual bytes: the window is exactly full
    assert t.calculate_delay_s() == pytest.approx(1.0)
    t.bytes_per_s = 12_001
    assert t.calculate_delay_s() == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=40), st.integers(100, 3000))
def test_reads_never_start_beyond_the_permits_of_the_windows_so_far(sizes, limit):
    clock = ManualClock()
    t = OffloadThrottle(bytes_per_s=limit, clock=clock)
    done = 0
    for size in sizes:
        ticket = t.before_read()
        assert math.isfinite(ticket.delay_s) and ticket.delay_s >= 0
        clock.advance(ticket.delay_s)
        window = math.floor(clock.now_s() + 1e-9)
        assert done < limit * (window + 1) or done == 0  # a read starts only while its window has permits
        t.after_read(ticket, size)
        done += size
