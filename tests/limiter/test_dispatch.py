import math
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter import (
    Dispatcher,
    DispatchRateLimiter,
    Level,
    ManualClock,
    PolicyError,
    Rate,
    ReadPlan,
    per_partition,
    resolve_dispatch_rate,
    resolve_subscription_dispatch_rate,
)
from limiter.paced import PacedDispatcher

pytestmark = pytest.mark.unit


def limiter(clock, msgs=-1, bytes_=-1, level=Level.TOPIC, period_s=1.0):
    return DispatchRateLimiter(Rate(msgs, bytes_, period_s), level, level.value, clock)


def seed_averages(dispatcher, msgs_per_entry, bytes_per_entry=0):
    """Teach the dispatcher its averages by delivering without limiters in the way."""
    probe = Dispatcher(precise_dispatcher_flow_control=dispatcher.precise)
    probe.charge(int(msgs_per_entry * 100), int(bytes_per_entry * 100), 100)
    dispatcher._sums = list(probe._sums)


def test_worked_example_from_the_module_essay(clock):
    topic = limiter(clock, msgs=10)
    a, b = Dispatcher(topic=topic), Dispatcher(topic=topic)
    seed_averages(a, 4)
    plan = a.plan_read(1000)
    assert (plan.entries, plan.max_msgs, plan.reserved_msgs) == (3, 10, 12)
    assert topic.available_msgs() == -2
    blocked = b.plan_read(1000)
    assert (blocked.entries, blocked.backoff_s, blocked.throttled_by) == (0, 1.0, Level.TOPIC)
    clock.advance(0.1)
    a.charge(11, 0, 3, plan)
    assert topic.available_msgs() == -1
    clock.advance(0.9)
    assert topic.available_msgs() == 9  # 11 delivered at 10/s leaves 9 for the next period


def test_tokens_come_once_per_period_and_debt_carries(clock):
    topic = limiter(clock, msgs=10)
    topic.consume(4, 0)
    clock.advance(0.99)
    assert topic.available_msgs() == 6  # no refill inside a period
    clock.advance(0.01)
    assert topic.available_msgs() == 10  # capped at the period's limit
    topic.consume(30, 0)  # 30 delivered at 10/s: the next two periods deliver nothing
    clock.advance(1)
    assert topic.available_msgs() == -10
    clock.advance(1)
    assert topic.available_msgs() == 0
    clock.advance(1)
    assert topic.available_msgs() == 10


def test_period_seconds_is_the_rate_period(clock):
    topic = limiter(clock, msgs=600, period_s=60)  # 600 per minute
    topic.consume(600, 0)
    clock.advance(59.9)
    assert topic.available_msgs() == 0
    clock.advance(0.1)
    assert topic.available_msgs() == 600


def test_read_sizing_batch_size_and_precise_flow_control(clock):
    d = Dispatcher(topic=limiter(clock, msgs=10_000))
    assert d.plan_read(1000).entries == 100  # min(permits, read batch size 100)
    assert d.plan_read(30).entries == 30
    seed_averages(d, 6)
    assert d.plan_read(1000).entries == math.ceil(100 / 6)
    assert d.plan_read(10).entries == 2  # the docs' example: 10/s, 6 msgs per entry -> 2 entries
    imprecise = Dispatcher(topic=limiter(clock, msgs=10_000), precise_dispatcher_flow_control=False)
    seed_averages(imprecise, 6)
    assert imprecise.plan_read(10).entries == 10  # Pulsar's default: one entry per message
    assert Dispatcher(dispatcher_max_read_batch_size=7).plan_read(1000).entries == 7


def test_no_consumer_permits_means_no_read_and_no_backoff(clock):
    plan = Dispatcher(topic=limiter(clock, msgs=10)).plan_read(0)
    assert (plan.entries, plan.backoff_s) == (0, 0)


def test_levels_are_checked_broker_topic_subscription_resource_group(clock):
    levels = {lvl: limiter(clock, msgs=10, level=lvl)
              for lvl in (Level.BROKER, Level.TOPIC, Level.SUBSCRIPTION, Level.RESOURCE_GROUP)}
    d = Dispatcher(broker=levels[Level.BROKER], topic=levels[Level.TOPIC],
                   subscription=levels[Level.SUBSCRIPTION], resource_group=levels[Level.RESOURCE_GROUP])
    for lvl in (Level.RESOURCE_GROUP, Level.SUBSCRIPTION, Level.TOPIC, Level.BROKER):
        levels[lvl].consume(10, 0)
        assert d.plan_read(100).throttled_by is lvl  # the first empty level in Pulsar's order
    assert levels[Level.BROKER].throttled_count == 1 and levels[Level.RESOURCE_GROUP].throttled_count == 1


def test_read_shrinks_to_the_least_left_over_all_levels_and_dimensions(clock):
    broker, topic, sub = (limiter(clock, msgs=100), limiter(clock, msgs=50, bytes_=10_000),
                          limiter(clock, msgs=30, level=Level.SUBSCRIPTION))
    d = Dispatcher(broker=broker, topic=topic, subscription=sub)
    assert d.plan_read(1000).entries == 1  # no average entry size known yet: one entry
    d.charge(1, 100, 1, d.plan_read(0))
    d._sums = [1.0, 1000.0, 1.0]  # entries of 1 msg, 1000 bytes
    for lim in (broker, topic, sub):
        lim.consume(-1000, -10**9)  # give everything back
    plan = d.plan_read(1000)
    assert (plan.entries, plan.max_msgs, plan.max_bytes) == (10, 30, 10_000)  # bytes: 10_000 / 1000
    d.charge(10, 10_000, 10, plan)
    assert topic.available_bytes() == 0 and topic.available_msgs() == 40 and sub.available_msgs() == 20
    assert d.plan_read(1000).throttled_by is Level.TOPIC  # bytes gone: logical AND


def test_bytes_permits_always_allow_one_entry(clock):
    topic = limiter(clock, bytes_=1000)
    d = Dispatcher(topic=topic)
    d._sums = [1.0, 5000.0, 1.0]  # entries bigger than the whole limit
    plan = d.plan_read(100)
    assert plan.entries == 1 and plan.reserved_bytes == 5000
    d.charge(1, 5000, 1, plan)
    assert topic.available_bytes() == -4000
    clock.advance(4)
    assert d.plan_read(100).throttled_by is Level.TOPIC
    clock.advance(1)
    assert d.plan_read(100).entries == 1


def test_unlimited_dimensions_have_no_bucket(clock):
    msgs_only = limiter(clock, msgs=10)
    assert msgs_only.available_bytes() == math.inf and msgs_only._bytes is None
    unlimited = limiter(clock)
    assert unlimited.has_permits() and unlimited._msgs is None
    d = Dispatcher(topic=unlimited)
    assert d.plan_read(1000).entries == 100
    assert Dispatcher().plan_read(50) == ReadPlan(50, throttled=False)


def test_batch_message_flag_counts_entries_not_messages(clock):
    topic = limiter(clock, msgs=10)
    d = Dispatcher(topic=topic, dispatch_throttling_on_batch_message=True)
    seed_averages(d, 30)
    plan = d.plan_read(1000)
    assert plan.entries == 10 and plan.reserved_msgs == 10  # 10 entries, whatever their message count
    d.charge(300, 0, 10, plan)
    assert topic.available_msgs() == 0
    counting_msgs = Dispatcher(topic=limiter(clock, msgs=10))
    counting_msgs.charge(300, 0, 10)
    assert counting_msgs.levels[0].available_msgs() == -290


def test_non_backlog_consumers_are_not_throttled_when_the_flag_is_off(clock):
    topic = limiter(clock, msgs=10)
    topic.consume(10, 0)
    relaxed = Dispatcher(topic=topic, dispatch_throttling_on_non_backlog_consumer=False)
    plan = relaxed.plan_read(50, has_backlog=False)
    assert plan.entries == 50 and not plan.throttled
    relaxed.charge(50, 500, 50, plan)
    relaxed.charge(5, 50, 5, has_backlog=False)
    assert topic.available_msgs() == 0  # neither throttled nor charged
    assert relaxed.plan_read(50, has_backlog=True).throttled_by is Level.TOPIC
    strict = Dispatcher(topic=topic)  # Pulsar's default: throttled either way
    assert strict.plan_read(50, has_backlog=False).throttled_by is Level.TOPIC


def test_an_overestimated_read_gives_back_but_never_above_capacity(clock):
    topic = limiter(clock, msgs=10)
    d = Dispatcher(topic=topic)
    seed_averages(d, 5)
    plan = d.plan_read(1000)
    assert plan.entries == 2 and topic.available_msgs() == 0
    d.charge(0, 0, 0, plan)  # the read found nothing
    assert topic.available_msgs() == 10
    topic.consume(-50, 0)
    assert topic.available_msgs() == 10


def test_live_rate_change_keeps_the_balance_trimmed_and_debt(clock):
    topic = limiter(clock, msgs=10)
    topic.consume(4, 0)
    topic.rate = Rate(20)
    assert topic.available_msgs() == 6  # no tokens invented mid-period
    clock.advance(1)
    assert topic.available_msgs() == 20
    topic.rate = Rate(5)
    assert topic.available_msgs() == 5
    topic.consume(12, 0)
    topic.rate = Rate(8)
    assert topic.available_msgs() == -7  # debt kept
    topic.rate = Rate(-1, 1000)  # msgs limit removed
    assert topic.available_msgs() == math.inf and topic.available_bytes() == 1000


def test_resolution_precedence_topic_namespace_broker():
    topic, ns, broker = Rate(1), Rate(2), Rate(3)
    assert resolve_dispatch_rate(topic, ns, broker) == (topic, Level.TOPIC)
    assert resolve_dispatch_rate(None, ns, broker) == (ns, Level.NAMESPACE)
    assert resolve_dispatch_rate(None, None, broker) == (broker, Level.BROKER)
    assert resolve_dispatch_rate(None, None, None) == (Rate.unlimited(), None)
    assert resolve_subscription_dispatch_rate(None, ns, broker) == (ns, Level.NAMESPACE)
    with pytest.raises(PolicyError, match="topic_policy must be a Rate or None"):
        resolve_dispatch_rate({"msgs": 1}, None, None)


def test_a_partitioned_topics_limit_applies_to_each_partition(clock):
    parts = per_partition(Rate(10), 2, "t0", clock=clock)
    assert [p.name for p in parts] == ["t0-partition-0", "t0-partition-1"]
    delivered = 0
    for part in parts:
        d = Dispatcher(topic=part)
        plan = d.plan_read(100)
        d.charge(plan.entries, 0, plan.entries, plan)
        delivered += plan.entries
    assert delivered == 20  # 2 partitions x 10/s
    with pytest.raises(ValueError, match="partitions"):
        per_partition(Rate(10), 0)


def test_bad_input_is_rejected_with_what_is_allowed(clock):
    with pytest.raises(PolicyError, match="msgs must be a finite number"):
        Rate(math.nan)
    with pytest.raises(PolicyError, match="must be a Rate"):
        DispatchRateLimiter(10, clock=clock)
    with pytest.raises(PolicyError, match="level must be a Level"):
        DispatchRateLimiter(Rate(10), "topic", clock=clock)
    with pytest.raises(PolicyError, match="DispatchRateLimiter or None"):
        Dispatcher(topic=Rate(10))
    with pytest.raises(ValueError, match="dispatcher_max_read_batch_size"):
        Dispatcher(dispatcher_max_read_batch_size=0)
    with pytest.raises(ValueError, match="backoff_s"):
        Dispatcher(backoff_s=math.inf)
    d = Dispatcher(topic=limiter(clock, msgs=10))
    with pytest.raises(ValueError, match="permits must be an integer >= 0"):
        d.plan_read(-1)
    with pytest.raises(ValueError, match="msgs must be an integer >= 0"):
        d.charge(-1, 0, 0)
    lim = limiter(clock, msgs=10)
    with pytest.raises(PolicyError):
        lim.rate = "10/s"
    assert lim.rate == Rate(10)


def test_paced_dispatcher_does_not_ask_again_before_its_backoff_ends(clock):
    topic = limiter(clock, msgs=10)
    paced = PacedDispatcher(Dispatcher(topic=topic), clock)
    plan = paced.plan_read(10)
    paced.charge(10, 0, plan.entries, plan)
    assert paced.plan_read(10) is None and topic.throttled_count == 1  # refused: backoff of 1 s starts
    clock.advance(0.5)
    assert paced.plan_read(10) is None and topic.throttled_count == 1  # still backing off: limiters not asked
    clock.advance(0.5)
    assert paced.plan_read(10).entries > 0


# --- accuracy -------------------------------------------------------------------------------------------------


def run_subscriptions(clock, dispatchers, entry_msgs, periods=10, step_s=0.01, reads_per_step=3):
    """Each step, every dispatcher that is not backing off plans; then every plan is delivered and charged --
    the worst interleaving (all check before anyone charges). Returns msgs delivered per dispatcher and the most
    msgs any single read delivered."""
    paced = [PacedDispatcher(d, clock) for d in dispatchers]
    delivered = [0] * len(dispatchers)
    biggest = 0
    for _ in range(round(periods / step_s)):
        for _ in range(reads_per_step):
            plans = [(i, d, plan) for i, d in enumerate(paced) if (plan := d.plan_read(1000)) is not None]
            for i, d, plan in plans:
                msgs = [entry_msgs() for _ in range(plan.entries)]
                d.charge(sum(msgs), 0, plan.entries, plan)
                delivered[i] += sum(msgs)
                biggest = max(biggest, sum(msgs))
        clock.advance(step_s)
    return delivered, biggest


def test_batched_entries_of_varying_size_stay_within_5_percent_over_10_periods(clock):
    rng = random.Random(4777)
    topic = limiter(clock, msgs=1000)
    (delivered,), biggest = run_subscriptions(clock, [Dispatcher(topic=topic)], lambda: rng.randint(1, 20))
    assert 0.95 * 10_000 <= delivered <= 1.05 * 10_000
    assert delivered <= 10_000 + biggest


def test_subscriptions_sharing_a_topic_limit_stay_within_5_percent(clock):
    rng = random.Random(8599)
    topic = limiter(clock, msgs=1000)
    subs = [Dispatcher(topic=topic, subscription=limiter(clock, msgs=500, level=Level.SUBSCRIPTION))
            for _ in range(3)]
    delivered, biggest = run_subscriptions(clock, subs, lambda: rng.randint(1, 20))
    assert 0.95 * 10_000 <= sum(delivered) <= 1.05 * 10_000
    assert all(d <= 5000 + biggest for d in delivered)


def test_subscriptions_sharing_a_topic_limit_from_real_threads(clock):
    topic = limiter(clock, msgs=1000)
    subs = [Dispatcher(topic=topic) for _ in range(3)]
    delivered = [0, 0, 0]
    barrier = threading.Barrier(4)
    steps = 1000  # 10 periods of 10 ms steps

    def worker(i):
        rng, sub = random.Random(i), PacedDispatcher(subs[i], clock)
        for _ in range(steps):
            barrier.wait()
            for _ in range(3):
                plan = sub.plan_read(1000)
                if plan is None:
                    break
                msgs = sum(rng.randint(1, 20) for _ in range(plan.entries))
                sub.charge(msgs, 0, plan.entries, plan)
                delivered[i] += msgs
            barrier.wait()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for _ in range(steps):
        barrier.wait()  # workers run this step concurrently
        barrier.wait()
        clock.advance(0.01)
    for t in threads:
        t.join()
    assert 0.95 * 10_000 <= sum(delivered) <= 1.05 * 10_000


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(1, 6), st.lists(st.integers(1, 30), min_size=1, max_size=20),
       st.booleans())
def test_over_any_n_periods_delivered_is_at_most_limit_times_n_plus_one_read(limit, periods, sizes, precise):
    # limit < the read batch size: a read's reservation covers all the permits it saw, so concurrent
    # subscriptions cannot both overshoot (module essay, rule 2)
    clock = ManualClock()
    topic = limiter(clock, msgs=limit)
    subs = [Dispatcher(topic=topic, precise_dispatcher_flow_control=precise) for _ in range(2)]
    cycle = iter(sizes * 10_000)
    delivered, biggest = run_subscriptions(clock, subs, lambda: next(cycle), periods=periods, step_s=0.1)
    assert sum(delivered) <= limit * periods + biggest
