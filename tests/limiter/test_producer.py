import asyncio
import gc
import math
import threading
import weakref

import pytest

from limiter import Level, ManualClock, Producer, ProducerPaused, PublishRateLimiter, Rate, ThrottleReason
from limiter.publish import WAITED_REMEMBERED

pytestmark = pytest.mark.unit


TEN_PER_S = Rate(msgs=10)


def make(clock, rate=TEN_PER_S, **options):
    lim = PublishRateLimiter(rate, level=Level.TOPIC, name="t", clock=clock)
    return Producer("p", [lim], clock=clock, **options), lim


def in_thread(fn):
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", fn()))
    thread.start()
    return thread, result


def test_try_acquire_charges_while_running_and_refuses_while_paused(clock):
    p, lim = make(clock)
    assert all(p.try_acquire() for _ in range(10))
    assert p.paused
    assert p.try_acquire() is False
    assert lim.snapshot().admitted_msgs == 10  # the refused call charged nothing


def test_acquire_waits_until_the_limiter_resumes_the_producer(clock):
    p, lim = make(clock)
    for _ in range(10):
        p.acquire()
    thread, result = in_thread(lambda: p.acquire())
    thread.join(0.05)
    assert thread.is_alive()  # paused: waits, no busy loop, no real sleep in the test
    clock.advance(0.1)
    thread.join(5)
    assert result["value"] is True
    assert lim.snapshot().admitted_msgs == 11


def test_acquire_timeout_runs_on_the_producers_clock_and_charges_nothing(clock):
    p, lim = make(clock, rate=Rate(msgs=1))
    p.acquire(5)  # -4: paused for (1 + 4) / 1 = 5 s
    thread, result = in_thread(lambda: p.acquire(timeout_s=2.0))
    thread.join(0.05)
    assert thread.is_alive()
    clock.advance(2.0)
    thread.join(5)
    assert result["value"] is False
    assert lim.snapshot().admitted_msgs == 5
    assert p.acquire(timeout_s=0) is False


def test_a_resumed_waiter_cancels_its_timeout_timer(clock):
    p, _ = make(clock)
    p.acquire(10)
    thread, result = in_thread(lambda: p.acquire(timeout_s=60))
    thread.join(0.05)
    clock.advance(0.1)
    thread.join(5)
    assert result["value"] is True
    assert clock.pending_timers() <= 1  # at most the limiter's own task, not the waiter's timeout


def test_acquire_async_awaits_without_blocking_the_loop(clock):
    p, _ = make(clock)

    async def scenario():
        for _ in range(10):
            assert await p.acquire_async()
        waiting = asyncio.ensure_future(p.acquire_async())
        await asyncio.sleep(0)
        assert not waiting.done()
        clock.advance(0.1)  # the resume callback resolves the future on this loop
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(scenario()) is True


def test_acquire_async_timeout(clock):
    p, _ = make(clock, rate=Rate(msgs=1))

    async def scenario():
        await p.acquire_async(5)
        waiting = asyncio.ensure_future(p.acquire_async(timeout_s=1))
        await asyncio.sleep(0)
        clock.advance(1)
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(scenario()) is False


def test_send_context_counts_pending_requests_with_hysteresis(clock):
    p, _ = make(clock, rate=Rate.unlimited(), max_pending_requests=2)
    with p.send(), p.send():
        assert not p.paused
        with p.send():
            assert p.paused and p.tracker.count(ThrottleReason.PENDING_PUBLISH_REQUESTS) == 1
        assert p.paused  # 2 pending: not yet down to half of 2
    assert not p.paused and p.pending_requests == 0


def test_publish_buffer_memory_reason(clock):
    p, _ = make(clock, rate=Rate.unlimited(), max_pending_bytes=1000)
    with p.send(1, 600):
        with p.send(1, 600):
            assert p.paused
            assert p.tracker.count(ThrottleReason.PUBLISH_BUFFER_MEMORY) == 1
        assert p.paused  # 600 pending: not yet down to half of 1000
    assert not p.paused and p.pending_bytes == 0


def test_send_raises_when_still_paused_after_its_timeout(clock):
    p, _ = make(clock, rate=Rate(msgs=1))
    p.acquire(3)
    with pytest.raises(ProducerPaused, match="still paused"), p.send(timeout_s=0):
        pass


def test_bad_options_are_refused_with_what_is_allowed(clock):
    with pytest.raises(ValueError, match="max_pending_requests must be a whole number > 0"):
        make(clock, max_pending_requests=0)
    with pytest.raises(ValueError, match="max_pending_bytes"):
        make(clock, max_pending_bytes=1.5)
    p, _ = make(clock, rate=Rate(msgs=1))
    p.acquire(3)
    with pytest.raises(ValueError, match="timeout_s must be >= 0"):
        p.acquire(timeout_s=-1)


def test_many_threads_through_one_limiter_all_finish_and_the_total_is_exact():
    clock = ManualClock()
    p, lim = make(clock, rate=Rate(msgs=100))
    done = []

    def worker():
        for _ in range(50):
            p.acquire()
        done.append(1)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(10_000):
        if len(done) == 4:
            break
        clock.advance(0.01)
        threads[0].join(0.001)
    for t in threads:
        t.join(10)
    assert len(done) == 4
    assert lim.snapshot().admitted_msgs == 200


def pooled(clock: ManualClock) -> PublishRateLimiter:
    """A shared limit's pool: refilled by nothing but deposits (collectors.grants does the depositing)."""
    lim = PublishRateLimiter(Rate(1e-6, -1, 1), level=Level.TOPIC, name="acme/web/clicks", clock=clock)
    lim.update_rate(Rate(1e-6, -1, 1), capacity=(1000.0, 0.0))
    return lim


def test_a_dry_pool_holds_a_fresh_producer_before_it_sends(clock: ManualClock) -> None:
    lim = pooled(clock)
    first, second = (Producer(f"p{i}", [lim], clock=clock) for i in range(2))
    assert not first.try_acquire(100)                  # nothing granted yet: paused, nothing charged
    assert first.paused and lim.balance()[0] == pytest.approx(0, abs=1e-5)
    lim.deposit(30)
    clock.advance(0.001)                               # the release runs
    assert not first.paused
    assert first.try_acquire(100)                      # tokens left: it sends (one send may overdraw)
    assert not second.try_acquire(100)                 # ... and the next producer waits for the next grant
    assert lim.balance()[0] == pytest.approx(-70, abs=1e-3)


def test_a_producer_dropped_while_it_waits_is_not_kept_alive_by_the_queue(clock: ManualClock) -> None:
    lim = pooled(clock)
    producer = Producer("task", [lim], clock=clock)
    assert not producer.try_acquire(10)
    gone = weakref.ref(producer)
    del producer
    gc.collect()
    assert gone() is None                              # its task ended: it no longer holds a claim on the pool
    lim.deposit(5)
    clock.advance(0.001)
    assert lim.queue_length() == 0 and lim.balance()[0] == pytest.approx(5, abs=1e-5)


def test_a_static_split_that_holds_makes_a_new_producer_wait_out_the_debt(clock: ManualClock) -> None:
    # one worker's static part of a shared limit: a new task's producer must not send on its debt (each task of
    # each worker would add one send to the shared limit's window); a plain limiter lets it, as Pulsar does
    plain = PublishRateLimiter(Rate(msgs=500), level=Level.TOPIC, name="t", clock=clock)
    split = PublishRateLimiter(Rate(msgs=500), level=Level.TOPIC, name="t", clock=clock)
    split.update_rate(Rate(msgs=500), burst_s=0.1, hold_when_dry=True)
    assert split.holds_when_dry and not plain.holds_when_dry
    for lim in (plain, split):
        first = Producer("task 1", [lim], clock=clock)
        assert first.try_acquire(100)     # 50 tokens held (the split 51, a token to release at): a debt of 50 (49)
        del first
    assert Producer("task 2", [plain], clock=clock).try_acquire(100)    # Pulsar's rule: -150 now
    late = Producer("task 2", [split], clock=clock)
    assert not late.try_acquire(100) and late.paused        # the split holds it, nothing charged
    assert split.balance()[0] == pytest.approx(-49, abs=1e-3)
    clock.advance(0.09)                                    # the debt is not repaid yet at 500/s ...
    assert late.paused
    clock.advance(0.05)                                    # ... now it is, with tokens to spare: released
    assert not late.paused and late.try_acquire(100)
    split.update_rate(Rate(msgs=500))                      # a plain limiter again (the pool is back, say)
    assert not split.holds_when_dry


def test_a_plain_limiter_charges_first_and_throttles_after(clock: ManualClock) -> None:
    # Pulsar's rule stands where no pool is involved: the send that crosses the limit goes through
    lim = PublishRateLimiter(Rate(msgs=10), level=Level.TOPIC, name="t", clock=clock)
    producer = Producer("p", [lim], clock=clock)
    assert producer.try_acquire(25)
    assert producer.paused


def test_most_per_acquire_is_a_40th_of_the_tightest_limit_of_each_dimension(clock: ManualClock) -> None:
    topic = PublishRateLimiter(Rate(msgs=1000), level=Level.TOPIC, name="t", clock=clock)
    tenant = PublishRateLimiter(Rate(msgs=400, bytes=1_000_000), level=Level.TENANT, name="acme", clock=clock)
    assert Producer("p", [topic, tenant], clock=clock).most_per_acquire() == (10.0, 25_000.0)
    assert Producer("p", [topic], clock=clock).most_per_acquire(share=0.1) == (100.0, math.inf)


def test_most_per_acquire_of_a_shared_pool_is_by_what_the_pool_holds_per_period(clock: ManualClock) -> None:
    # (a pool's own refill rate is next to nothing: the grants fill it, up to the limit per period)
    assert Producer("p", [pooled(clock)], clock=clock).most_per_acquire() == (25.0, math.inf)


def test_most_per_acquire_with_no_limit_is_unbounded_and_a_bad_share_is_refused(clock: ManualClock) -> None:
    p = Producer("p", [PublishRateLimiter(Rate.unlimited(), clock=clock)], clock=clock)
    assert p.most_per_acquire() == (math.inf, math.inf)
    for bad in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match="share must be a part of the limit, > 0 and <= 1"):
            p.most_per_acquire(share=bad)


def test_a_pool_says_the_send_its_producers_make_next(clock: ManualClock) -> None:
    # told with the keeper's asks (``limiter.grants``: what a micro-batch worker sends ahead of its grant): the send
    # the producer was last refused while it waited, else the one it was queued with; one gone is passed over; and
    # with none waiting, the largest of the sends the last few were queued with (a new task's first ask comes before
    # its first send, and its sends are whole, not the remainder that ended the task before)
    lim = pooled(clock)
    assert lim.send_msgs() == 0.0                                        # none ever waited: not known
    first = Producer("task 1", [lim], clock=clock)
    assert not first.try_acquire(25) and first.paused                  # nothing granted yet: queued with 25
    assert lim.send_msgs() == 25
    clock.advance(0.001)
    assert not first.try_acquire(12)                                   # its task's last rows, refused too
    assert lim.send_msgs() == 12
    assert not asyncio.run(first.acquire_async(10, timeout_s=0))       # an async sender says its send too
    assert lim.send_msgs() == 10
    second = Producer("task 2", [lim], clock=clock)
    assert not second.try_acquire(20)
    clock.advance(0.001)
    assert not second.try_acquire(7)
    del first
    gc.collect()
    assert lim.send_msgs() == 7
    del second
    gc.collect()
    assert lim.send_msgs() == 25                       # none waits: the largest the last ones were queued with (not 20)
    for i in range(WAITED_REMEMBERED):                 # ... of the last few only: a job whose sends got smaller
        later = Producer(f"task {3 + i}", [lim], clock=clock)
        assert not later.try_acquire(5)
        del later
        gc.collect()
    assert lim.send_msgs() == 5


@pytest.mark.timeout(10)
def test_a_split_that_holds_left_with_a_hair_of_a_token_releases_its_producer_when_a_whole_one_is_refilled(
        clock: ManualClock) -> None:
    # a release that found less than a whole token (a hair: a rate change, a deposit) timed the next for when the
    # hair was "refilled" -- at once -- and spun on it without the clock moving
    split = PublishRateLimiter(Rate(msgs=500), level=Level.TOPIC, name="t", clock=clock)
    split.update_rate(Rate(msgs=500), burst_s=0.1, hold_when_dry=True)
    late = Producer("task", [split], clock=clock)
    assert late.try_acquire(100) and late.paused                       # 51 held: a debt of 49 now
    clock.advance(0.1)                                                 # refilled to about nothing
    split._msgs_bucket.deposit(0.5 - split.balance()[0])              # a hair of a token
    split._unthrottle()                                                # its timer's run now
    clock.advance(0.0)
    assert late.paused
    clock.advance(0.02)                                                # its throttling target refilled
    assert not late.paused


def test_a_split_that_holds_keeps_what_refills_while_its_producer_wakes_up(clock: ManualClock) -> None:
    # a static split of 100 msgs/s holding a hundredth of a second (one token) was due back when full: each release
    # that the producer acted on late -- the timer's thread, then the task's, each waiting for the GIL -- lost its
    # refill (a Spark worker's split ran at 0.94-0.96 of its rate through a control-plane outage)
    split = PublishRateLimiter(Rate(msgs=100), level=Level.TOPIC, name="t", clock=clock)
    split.update_rate(Rate(msgs=100), burst_s=0.01, hold_when_dry=True)
    producer = Producer("task", [split], clock=clock)
    sent_at_s = []
    for _ in range(50):
        while producer.paused:
            clock.advance(0.001)
        clock.advance(0.008)                     # the producer sends 8 ms after its release (1-ms steps: 8-9 ms)
        assert producer.try_acquire(10)
        sent_at_s.append(clock.now_s())
    steady = sent_at_s[5:]                       # (past what the bucket held at the start)
    rate = 10 * (len(steady) - 1) / (steady[-1] - steady[0])
    assert rate == pytest.approx(100, rel=0.005)   # (due when full: 92.6)
    assert split.snapshot().admitted_msgs == 500


def test_will_send_says_what_is_coming_and_each_charge_counts_it_down(clock):
    p, _ = make(clock, Rate(msgs=1000))
    assert p.coming_msgs is None   # never said: not known
    p.will_send(62)
    for expected in (37.0, 12.0, 0.0):
        assert p.try_acquire(25 if expected else 12)
        assert p.coming_msgs == expected
    p.will_send(40)
    p.will_send(30)          # a new batch replaces what was left of the last
    assert p.acquire(100)    # more than was said: nothing below zero
    assert p.coming_msgs == 0.0


def test_a_send_refused_after_all_that_was_said_is_charged_is_coming_too(clock):
    # (else a shared limit's dry pool reads "nothing more" and asks for nothing while the send waits)
    p, _ = make(clock, Rate(msgs=100))
    p.will_send(100)
    assert p.try_acquire(100) and p.paused and p.coming_msgs == 0.0   # the bucket is spent: paused
    assert not p.try_acquire(25)
    assert p.coming_msgs == 25.0
    p2, _ = make(clock, Rate(msgs=100))
    assert p2.try_acquire(100) and not p2.try_acquire(25)
    assert p2.coming_msgs is None                                     # never said: still not known


@pytest.mark.parametrize("bad", [-1, math.inf, math.nan, True, "62", None])
def test_will_send_refuses_what_is_no_number_of_messages(clock, bad):
    p, _ = make(clock)
    p.will_send(5)
    with pytest.raises(ValueError, match="msgs must be a finite number of messages >= 0, got "):
        p.will_send(bad)
    assert p.coming_msgs == 5.0   # (what it said before stands)
