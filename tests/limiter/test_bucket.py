import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter import AsyncTokenBucket, ManualClock

pytestmark = pytest.mark.unit


def bucket(clock, **kw):
    kw.setdefault("rate", 10)
    return AsyncTokenBucket(clock=clock, **kw)


def test_defaults_follow_pulsars_final_rate_variant(clock):
    b = AsyncTokenBucket(rate=100, clock=clock)
    assert (b.rate, b.capacity, b.tokens(), b.period_s, b.resolution_s) == (100, 100, 100.0, 1.0, 0.016)


def test_worked_example_from_the_module_essay(clock):
    start = clock.now_s()
    b = bucket(clock, capacity=100, initial_tokens=0)
    clock.advance(0.001)
    assert b.consume_and_check(5) is False
    clock.advance(0.001)
    assert b.consume_and_check(1) is False
    clock.advance(0.008)
    assert b.throttling_duration_s() == pytest.approx(0.7)
    assert b.tokens() == -6
    clock.advance(0.7)
    assert b.tokens() == 1
    clock.advance(20.0 - (clock.now_s() - start))
    assert b.tokens() == 100


def test_adds_tokens_at_the_configured_rate_and_caps_at_capacity(clock):
    b = bucket(clock, capacity=100, initial_tokens=0)
    clock.advance(5)
    assert b.tokens() == 50
    clock.advance(100)
    assert b.tokens() == 100


def test_remainder_is_carried_so_tiny_updates_lose_no_fraction(clock):
    b = bucket(clock, rate=3, capacity=1000, initial_tokens=0, resolution_s=0)
    for _ in range(1000):
        clock.advance(0.001)
        b.tokens()
    assert b.tokens() == 3  # 1000 updates of 0.003 tokens each


def test_fractional_rates(clock):
    b = bucket(clock, rate=0.5, capacity=10, initial_tokens=0)
    clock.advance(3)
    assert b.tokens() == 1  # 1.5 earned, the half carried
    clock.advance(1)
    assert b.tokens() == 2


def test_pending_consumption_is_subtracted_before_the_capacity_cap(clock):
    b = bucket(clock, capacity=10)  # full
    clock.advance(0.001)
    b.consume(5)  # within the tick: pending
    clock.advance(0.3)  # +3 tokens
    assert b.tokens() == 8  # 10 - 5 + 3; capping first (min(13, 10) - 5) would say 5


def test_debt_from_before_a_long_pause_is_repaid_by_the_pause_not_forgiven_twice(clock):
    b = bucket(clock, capacity=10)
    clock.advance(0.001)
    b.consume(50)  # deep overdraw within a tick: -40
    clock.advance(3)  # +30
    assert b.tokens() == -10
    clock.advance(100)
    assert b.tokens() == 10


def test_this_call_is_charged_after_the_cap(clock):
    b = bucket(clock, capacity=10)
    clock.advance(60)  # far past capacity
    assert b.consume_and_check(4) is True  # this call updates: min(10 + 600, 10) - 4
    assert b.tokens() == 6


def test_balance_goes_negative_and_throttling_duration_targets_one_resolution_of_tokens(clock):
    b = bucket(clock, rate=1000, capacity=1000, resolution_s=0.016)
    b.consume(1500)
    assert b.tokens() == -500
    # target = max(0.016 s * 1000/s, 1) = 16 tokens -> (16 + 500) / 1000
    assert b.throttling_duration_s() == pytest.approx(0.516)
    assert not b.contains_tokens(force_update=True)
    clock.advance(0.516)
    assert b.tokens() == 16
    assert b.throttling_duration_s() == 0.0


def test_throttling_duration_target_keeps_a_ticks_refill_of_room_below_a_small_capacity(clock):
    # a bucket that holds 5 tokens (0.01 s of 500/s) is due back at one token: not when it would hold 8 (one
    # resolution tick of refill), which it cannot hold, and not when full either -- the producer sends a little
    # after it is due, and what refilled meanwhile overflowed a full bucket at every wake-up
    b = bucket(clock, rate=500, capacity=5, resolution_s=0.016)
    b.consume(100)
    assert b.tokens() == -95
    assert b.throttling_duration_s() == pytest.approx(0.192)
    clock.advance(0.192)
    assert b.tokens() == 1
    # a larger one aims a tick's refill below its capacity (12 - 8 = 4 tokens), a large one at a tick's refill (8)
    for capacity, target in ((12, 4), (20, 8)):
        b = bucket(clock, rate=500, capacity=capacity, resolution_s=0.016)
        b.consume(100 + capacity)
        assert b.throttling_duration_s() == pytest.approx((100 + target) / 500)


def test_throttling_duration_target_is_at_least_one_token(clock):
    b = bucket(clock, rate=10, capacity=10, initial_tokens=0)
    assert b.throttling_duration_s() == pytest.approx(0.1)


def test_unit_consumption_within_a_tick_is_admitted_exactly_up_to_the_balance(clock):
    b = bucket(clock, rate=10, capacity=10)  # 10 tokens, next update 16 ms away
    answers = [b.consume_and_check(1) for _ in range(12)]
    assert answers == [True] * 9 + [False] * 3  # the 10th leaves 0 tokens: no tokens remain
    clock.advance(0.02)
    assert b.tokens() == -2 + 0  # 20 ms at 10/s is 0.2 token: still -2 (carried)


def test_other_amounts_within_a_tick_use_the_estimate_and_are_charged_exactly(clock):
    b = bucket(clock, rate=100, capacity=100)
    assert b.consume_and_check(60) is True
    assert b.consume_and_check(60) is False
    assert b.tokens() == -20


def test_resolution_zero_is_always_consistent(clock):
    b = bucket(clock, rate=10, capacity=10, resolution_s=0)
    for expected in range(9, -3, -1):
        assert b.consume_and_check(1) is (expected > 0)
        assert b.tokens() == expected
    clock.advance(0.1)
    assert b.tokens() == -1


def test_live_rate_change_settles_tokens_earned_at_the_old_rate(clock):
    b = bucket(clock, rate=10, capacity=1000, initial_tokens=0)
    clock.advance(0.5)  # 5 earned at 10/s, not yet read
    b.rate = 100
    clock.advance(0.1)  # 10 more at 100/s
    assert b.tokens() == 15


def test_live_rate_change_keeps_the_fraction_already_earned(clock):
    b = bucket(clock, rate=1, capacity=1000, initial_tokens=0)
    clock.advance(0.5)
    b.rate = 2
    clock.advance(0.25)
    assert b.tokens() == 1  # 0.5 + 0.5


def test_live_capacity_change_trims_but_never_invents_or_forgives(clock):
    b = bucket(clock, rate=10, capacity=100)
    b.capacity = 40
    assert b.tokens() == 40
    b.capacity = 200
    assert b.tokens() == 40
    b.consume(100)
    b.capacity = 10
    assert b.tokens() == -60


def test_a_trimmed_capacity_holds_for_one_unit_calls_at_once(clock):
    b = bucket(clock, rate=100_000, capacity=100_000)   # one tick's refill is 1,600: a large unit allowance
    assert b.consume_and_check(1)
    b.capacity = 10
    assert [b.consume_and_check(1) for _ in range(12)] == [True] * 9 + [False] * 3   # as a bucket of 10 does


def test_unit_calls_on_a_large_balance_update_once_per_tick_of_refill(clock):
    """With more than a tick's refill in the bucket, consume(1) admits that much, then updates (in the same tick):
    the other channel's consumption is seen by then."""
    b = bucket(clock, rate=100_000, capacity=100_000)
    assert b.consume_and_check(1)                      # updates: 99,999 left, 1,600 of them for consume(1)
    assert b.consume_and_check(99_989) is True         # the deque channel takes almost everything (10 left)
    answers = [b.consume_and_check(1) for _ in range(1_610)]
    # the slice is admitted (the update's own number is one of its 1,600), then the next call updates and sees
    # the deque's consumption: a stale slack of one tick's refill, never more
    assert answers == [True] * 1_599 + [False] * 11
    assert b.tokens() == 10 - 1_610


@pytest.mark.parametrize("kwargs, message", [
    ({"rate": 0}, "rate must be"), ({"rate": -1}, "rate must be"), ({"rate": math.nan}, "rate must be"),
    ({"rate": math.inf}, "rate must be"), ({"rate": "10"}, "rate must be"), ({"rate": True}, "rate must be"),
    ({"rate": 10, "capacity": 0}, "capacity must be"), ({"rate": 10, "period_s": 0}, "period_s must be"),
    ({"rate": 10, "resolution_s": -0.1}, "resolution_s must be"),
    ({"rate": 10, "capacity": 10, "initial_tokens": 11}, "initial_tokens must be"),
])
def test_bad_arguments_say_what_is_allowed(clock, kwargs, message):
    with pytest.raises(ValueError, match=message):
        AsyncTokenBucket(clock=clock, **kwargs)


def test_bad_live_changes_are_refused_and_change_nothing(clock):
    b = bucket(clock)
    with pytest.raises(ValueError):
        b.rate = -5
    with pytest.raises(ValueError):
        b.capacity = math.nan
    assert (b.rate, b.capacity) == (10, 10)


def test_clock_readings_older_than_the_last_update_count_as_no_time(clock):
    b = bucket(clock, rate=10, capacity=100, initial_tokens=0, resolution_s=0)
    clock.advance(1)
    assert b.tokens() == 10
    b._update(b._last_ns - 500_000_000, 0)  # a thread that read the clock earlier updates later
    assert b.tokens() == 10


def run_threads(n_threads, target):
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def test_concurrent_consumers_lose_and_double_count_no_token():
    clock = ManualClock()
    # never full, so nothing is capped: the balance must be exactly earned - consumed
    b = AsyncTokenBucket(rate=1000, capacity=10**15, initial_tokens=0, resolution_s=0.001, clock=clock)
    per_thread = 20_000
    stop = threading.Event()

    def advance():  # ticks pass while consumers run, so updates race with the fast path
        while not stop.is_set():
            clock.advance(0.001)

    ticker = threading.Thread(target=advance)
    ticker.start()

    def consume(i):
        for k in range(per_thread):
            b.consume(1 if k % 3 else 2 + i)
            b.consume_and_check(1)

    run_threads(8, consume)
    stop.set()
    ticker.join(10)
    expected = sum((1 if k % 3 else 2 + i) + 1 for i in range(8) for k in range(per_thread))
    assert b.consumed_total() == expected
    earned = clock.now_ns() * 1000 // 1_000_000_000
    assert b.tokens() == earned - expected


@settings(max_examples=5, deadline=None)
@given(amounts=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=4))
def test_property_concurrent_consumers_lose_no_tokens(amounts):
    clock = ManualClock()
    b = AsyncTokenBucket(rate=1, capacity=10**9, resolution_s=0.016, clock=clock)
    run_threads(len(amounts), lambda i: [b.consume(amounts[i]) or b.consume(1) for _ in range(2000)])
    assert b.tokens() == 10**9 - sum(2000 * (a + 1) for a in amounts)


ops = st.lists(st.tuples(st.floats(min_value=0, max_value=0.05), st.integers(min_value=1, max_value=20)),
               min_size=1, max_size=300)


def lazy_send(b, throttled, n):
    """A producer that sends only while not throttled (Pulsar's lazy throttling) tries to send ``n``:
    (whether it sent, whether it is throttled now)."""
    if throttled and not b.contains_tokens(force_update=True):
        return False, True
    return True, not b.consume_and_check(n)


@settings(max_examples=200, deadline=None)
@given(ops=ops, rate=st.integers(min_value=1, max_value=500), capacity=st.integers(min_value=1, max_value=200),
       resolution_s=st.sampled_from([0, 0.001, 0.016]))
def test_property_admitted_never_exceeds_capacity_plus_rate_times_t(ops, rate, capacity, resolution_s):
    """A producer sends only while not throttled (Pulsar's lazy throttling). Over the whole run, what it got
    admitted is at most capacity + rate * t plus its one send that crossed the limit: the eventual-consistency
    slack is bounded by the balance, so no more than that."""
    clock = ManualClock()
    b = AsyncTokenBucket(rate=rate, capacity=capacity, resolution_s=resolution_s, clock=clock)
    admitted, throttled, elapsed, biggest = 0, False, 0.0, 0
    for dt, n in ops:
        clock.advance(dt)
        elapsed += dt
        sent, throttled = lazy_send(b, throttled, n)
        if sent:
            admitted += n
            biggest = max(biggest, n)
    assert admitted <= capacity + rate * elapsed + biggest + 1e-6
    assert b.consumed_total() == admitted


bursts = st.lists(st.tuples(st.floats(min_value=0, max_value=3.0), st.integers(min_value=0, max_value=400)),
                  min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(bursts=bursts, rate=st.integers(min_value=1, max_value=5000), capacity=st.integers(min_value=1, max_value=500),
       resolution_s=st.sampled_from([0, 0.001, 0.016]))
def test_property_every_window_admits_at_most_capacity_plus_its_refill(bursts, rate, capacity, resolution_s):
    """consume(1) only: pauses (up to 3 s, long enough to refill past capacity) then bursts, time moving 1 µs a
    call. In *every* window -- not just the whole run -- what was admitted is at most capacity + rate * window,
    plus the slack of eventual consistency: one resolution tick's refill (the most one update lets consume(1)
    admit before the next) and the send that crossed the limit."""
    clock = ManualClock()
    b = AsyncTokenBucket(rate=rate, capacity=capacity, resolution_s=resolution_s, clock=clock)
    admitted_at: list[float] = []
    t, throttled = 0.0, False
    for pause_s, calls in bursts:
        clock.advance(pause_s)
        t += pause_s
        for _ in range(calls):
            clock.advance(1e-6)
            t += 1e-6
            sent, throttled = lazy_send(b, throttled, 1)
            if sent:
                admitted_at.append(t)
    slack = max(1, math.ceil(rate * resolution_s)) + 1
    # every window [admitted_at[i], admitted_at[j]]: j - i + 1 <= capacity + rate * (its length) + slack, i.e.
    # (j + 1 - rate * admitted_at[j]) - (i - rate * admitted_at[i]) <= capacity + slack, checked with a running min
    lowest = math.inf
    for j, at in enumerate(admitted_at):
        lowest = min(lowest, j - rate * at)
        assert (j + 1 - rate * at) - lowest <= capacity + slack + 1e-6, j
    assert b.consumed_total() == len(admitted_at)


def test_charged_ns_is_the_tick_read_by_the_newest_charge_reads_and_deposits_are_not_charges(clock):
    b = bucket(clock, rate=100, capacity=100)
    assert b.charged_ns is None
    clock.advance(0.003)
    b.consume_and_check(5)                       # an amount other than 1: recorded, at the tick it read
    at_ns = clock.tick_cell[0]
    clock.advance(0.004)
    b.tokens()
    b.deposit(3)
    assert b.charged_ns == at_ns                 # a read and a deposit spend nothing


def test_a_pool_records_every_consume_of_one(clock):
    # (a bucket filled by deposits refills a hair a tick: its allowance is one unit, so every consume(1) updates)
    b = bucket(clock, rate=1e-6, capacity=1000, initial_tokens=500)
    for _ in range(3):
        clock.advance(0.001)
        b.consume_and_check(1)
        assert b.charged_ns == clock.tick_cell[0]


def test_charged_ns_skips_a_consume_of_one_within_its_allowance(clock):
    # (what the hot path of one message costs is the reason: within the allowance it reads no tick at all)
    b = bucket(clock, rate=1000, capacity=1000)  # an allowance of one tick's refill: 16 units
    b.consume_and_check(1)
    first = b.charged_ns
    clock.advance(0.001)
    assert b.consume_and_check(1) is True
    assert b.charged_ns == first
