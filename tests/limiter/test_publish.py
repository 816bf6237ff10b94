import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter import Level, ManualClock, PublishRateLimiter, Rate, ThrottleTracker

pytestmark = pytest.mark.unit


class FakeProducer:
    """The limiter's view of a producer: a name and a tracker (the real Producer is tested elsewhere)."""

    def __init__(self, name):
        self.name = name
        self.tracker = ThrottleTracker(name=name)

    @property
    def paused(self):
        return self.tracker.throttled


def limiter(clock, **rate):
    return PublishRateLimiter(Rate(**rate), level=Level.TOPIC, name="t", clock=clock)


def test_worked_example_from_the_essay(clock):
    lim = limiter(clock, msgs=10)
    p = FakeProducer("p")
    assert lim.handle_publish_throttling(p, 12) is True
    assert p.paused and lim.queue_length() == 1
    clock.advance(0.29)
    assert p.paused
    clock.advance(0.01)
    assert not p.paused
    assert lim.handle_publish_throttling(p, 12) is True  # tokens 1 - 12 = -11
    clock.advance(1.19)
    assert p.paused
    clock.advance(0.01)
    assert not p.paused


def test_sends_within_the_limit_pass_and_are_counted(clock):
    lim = limiter(clock, msgs=100, bytes=10_000)
    p = FakeProducer("p")
    for _ in range(50):
        assert lim.handle_publish_throttling(p, 1, 100) is False
    snap = lim.snapshot()
    assert (snap.admitted_msgs, snap.admitted_bytes, snap.throttled_count) == (50, 5000, 0)
    assert {b.dimension: b.tokens for b in snap.buckets} == {"msgs": 50, "bytes": 5000}


def test_msgs_and_bytes_are_a_logical_and(clock):
    lim = limiter(clock, msgs=1000, bytes=500)
    p = FakeProducer("p")
    assert lim.handle_publish_throttling(p, 1, 600) is True  # plenty of msgs, bytes exhausted
    assert p.paused


def test_unlimited_dimensions_have_no_bucket_but_still_count(clock):
    lim = limiter(clock)
    p = FakeProducer("p")
    for _ in range(10_000):
        assert lim.handle_publish_throttling(p, 1, 3) is False
    snap = lim.snapshot()
    assert snap.buckets == () and snap.admitted_msgs == 10_000 and snap.admitted_bytes == 30_000


def test_fifo_queue_releases_in_arrival_order_spending_each_producers_last_send(clock):
    lim = limiter(clock, msgs=10)
    a, b, c = FakeProducer("a"), FakeProducer("b"), FakeProducer("c")
    lim.handle_publish_throttling(a, 10)  # 0 left: a throttled
    lim.handle_publish_throttling(b, 5)
    lim.handle_publish_throttling(c, 5)
    assert [e.producer for e in lim.snapshot().queue] == ["a", "b", "c"]
    assert clock.pending_timers() == 1  # one task, however many are queued
    # tokens -10; the task wakes when 1 token is back (1.1 s): a goes first, its 10 exhaust the budget
    clock.advance(1.1)
    assert (a.paused, b.paused, c.paused) == (False, True, True)
    clock.advance(1.0)  # +10 -> 11 tokens: b (5) and c (5) both fit
    assert (b.paused, c.paused) == (False, False)
    assert lim.queue_length() == 0 and clock.pending_timers() == 0


def test_throttle_time_and_count_accumulate(clock):
    lim = limiter(clock, msgs=10)
    p = FakeProducer("p")
    lim.handle_publish_throttling(p, 11)  # -1 -> wait (1 - -1)/10 = 0.2 s
    clock.advance(0.1)
    assert lim.snapshot().throttle_time_s == pytest.approx(0.1)  # in progress counts
    assert lim.snapshot().queue[0].waiting_s == pytest.approx(0.1)
    clock.advance(0.1)
    snap = lim.snapshot()
    assert snap.throttle_time_s == pytest.approx(0.2) and snap.throttled_count == 1 and snap.queue == ()


def test_raising_or_removing_a_limit_unthrottles_immediately(clock):
    for new in (Rate(msgs=20), Rate.unlimited()):
        lim = limiter(clock, msgs=10)
        p = FakeProducer("p")
        lim.handle_publish_throttling(p, 100)
        assert p.paused
        lim.update_rate(new)
        assert not p.paused and lim.queue_length() == 0
        assert clock.pending_timers() == 0


def test_lowering_a_limit_replans_the_unthrottle_task(clock):
    lim = limiter(clock, msgs=100)
    p = FakeProducer("p")
    lim.handle_publish_throttling(p, 101)  # -1 -> (1.6 + 1) / 100 s at 100/s
    lim.update_rate(Rate(msgs=10))  # now (1 + 1) / 10 = 0.2 s
    assert p.paused
    clock.advance(0.1)
    assert p.paused
    clock.advance(0.1)
    assert not p.paused
    assert clock.pending_timers() == 0


def test_live_change_keeps_tokens_and_counters(clock):
    lim = limiter(clock, msgs=100)
    p = FakeProducer("p")
    lim.handle_publish_throttling(p, 30)
    lim.update_rate(Rate(msgs=50))
    snap = lim.snapshot()
    assert snap.buckets[0].tokens == 50  # 70 trimmed to the new capacity
    lim.update_rate(Rate(msgs=50, period_s=2))
    lim.update_rate(Rate.unlimited())
    lim.handle_publish_throttling(p, 5)
    assert lim.snapshot().admitted_msgs == 35


def test_close_unthrottles_everyone(clock):
    lim = limiter(clock, msgs=1)
    ps = [FakeProducer(str(i)) for i in range(3)]
    for p in ps:
        lim.handle_publish_throttling(p, 5)
    lim.close()
    assert not any(p.paused for p in ps) and clock.pending_timers() == 0


actions = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(0, 4), st.integers(1, 30)),
    st.tuples(st.just("advance"), st.floats(0, 0.5), st.just(0)),
    st.tuples(st.just("rate"), st.sampled_from([0, 5, 10, 50, 200]), st.just(0)),
), max_size=80)


@settings(max_examples=150, deadline=None)
@given(actions=actions)
def test_property_no_producer_is_left_throttled_forever(actions):
    clock = ManualClock()
    lim = PublishRateLimiter(Rate(msgs=10), clock=clock, resolution_s=0.016)
    producers = [FakeProducer(str(i)) for i in range(5)]
    for kind, a, b in actions:
        if kind == "send":
            if not producers[a].paused:
                lim.handle_publish_throttling(producers[a], b)
        elif kind == "advance":
            clock.advance(a)
        else:
            lim.update_rate(Rate(msgs=a) if a else Rate.unlimited())
    # whatever happened, time alone releases everyone
    for _ in range(100):
        if not any(p.paused for p in producers):
            break
        clock.advance(10)
    assert not any(p.paused for p in producers)
    assert lim.queue_length() == 0 and clock.pending_timers() == 0
    assert all(p.tracker.mismatched_unmarks == 0 for p in producers)


def test_charged_ns_is_the_newest_of_its_buckets_and_none_before_any_send(clock):
    lim = limiter(clock, msgs=100, bytes=10_000)
    assert lim.charged_ns() is None
    lim.handle_publish_throttling(FakeProducer("p"), 2, 300)
    assert lim.charged_ns() == clock.tick_cell[0]
    clock.advance(0.5)
    assert lim.charged_ns() == clock.tick_cell[0] - 500_000_000
