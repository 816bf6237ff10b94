"""Limiters nothing used for a while are forgotten: a reused worker's rounds cost what its live limits cost."""

from __future__ import annotations

import gc

import pytest

from collectors.dispatching import DispatchLimits
from collectors.idle_limiters import FORGET_IDLE_S, IdleLimiters
from limiter import ManualClock, PublishLimits
from limiter.policy import Level, Rate

from .helpers import InProcessControlPlane, make_participant, policies

UNIT = pytest.mark.unit


@UNIT
def test_idle_only_after_idle_s_with_nothing_admitted_and_nothing_held() -> None:
    idle = IdleLimiters(10.0)
    assert not idle.look("a", 5.0, False, 0.0)      # first seen: not known idle yet
    assert not idle.look("a", 5.0, False, 9.9)
    assert idle.look("a", 5.0, False, 10.0)
    assert not idle.look("a", 6.0, False, 11.0)     # it admitted: idle from now
    assert not idle.look("a", 6.0, False, 20.9)
    assert not idle.look("a", 6.0, True, 21.0)      # held (a producer bound): idle from when it is not
    assert not idle.look("a", 6.0, False, 30.9)
    assert idle.look("a", 6.0, False, 31.0)
    idle.end_round()
    idle.end_round()                                 # a round without it: gone, seen afresh
    assert not idle.look("a", 6.0, False, 100.0)
    with pytest.raises(ValueError, match="idle_s must be a number of seconds > 0"):
        IdleLimiters(0)


@UNIT
def test_the_registry_forgets_only_limiters_no_live_producer_is_bound_to(clock: ManualClock) -> None:
    rates = {"acme": Rate(100)}
    limits = PublishLimits(clock, initial_rate=lambda level, name: rates.get(name))
    kept = limits.producer("acme/web/clicks")
    gone = limits.producer("blue/web/clicks")
    old_tenant = limits.limiter(Level.TENANT, "blue")
    del gone
    gc.collect()
    keys = [(Level.TENANT, "acme"), (Level.TENANT, "blue"), (Level.TOPIC, "blue/web/clicks"), (Level.TENANT, "x")]
    assert sorted(limits.forget(keys)) == [(Level.TENANT, "blue"), (Level.TOPIC, "blue/web/clicks")]
    names = {(lim.level, lim.name) for lim in limits.limiters()}
    assert (Level.TENANT, "acme") in names and (Level.TENANT, "blue") not in names
    assert kept.try_acquire(msgs=1)                  # the bound one still limits its producer
    rates["blue"] = Rate(7)
    again = limits.producer("blue/web/clicks")       # a new limiter, at the rate the hook gives now
    tenant = limits.limiter(Level.TENANT, "blue")
    assert tenant is not old_tenant and tenant.rate.msgs == 7
    assert again.try_acquire(msgs=7) and not again.try_acquire(msgs=1)


@UNIT
def test_the_dispatch_registry_forgets_unbound_limiters_and_their_totals(clock: ManualClock) -> None:
    limits = DispatchLimits(clock)
    kept = limits.dispatcher("acme/web/clicks", "s1")
    gone = limits.dispatcher("blue/web/clicks", "s1")
    del gone
    gc.collect()
    keys = [(Level.TOPIC, "acme/web/clicks"), (Level.TOPIC, "blue/web/clicks"),
            (Level.SUBSCRIPTION, "blue/web/clicks/s1")]
    assert sorted(limits.forget(keys)) == [(Level.SUBSCRIPTION, "blue/web/clicks/s1"),
                                           (Level.TOPIC, "blue/web/clicks")]
    assert limits.admitted(Level.TOPIC, "blue/web/clicks") == (0.0, 0.0)
    assert {(lim.level, lim.name) for lim in limits.limiters()} == {
        (Level.BROKER, "broker"), (Level.TOPIC, "acme/web/clicks"), (Level.SUBSCRIPTION, "acme/web/clicks/s1")}
    assert kept.levels[1] is limits.limiter(Level.TOPIC, "acme/web/clicks")


def _topics(n: int, per_s: float = 1000) -> dict:
    return {f"t{i}/ns/topic": {"publishRate": {"publishThrottlingRateInMsg": per_s}} for i in range(n)}


@UNIT
def test_a_worker_that_ran_many_jobs_forgets_their_limiters_and_keeps_the_live_ones(clock: ManualClock) -> None:
    """A reused worker ran twenty jobs, each on a topic of its own (a shared limit each), then keeps one stream: a
    minute after the last job, its keeper looks at the live pool alone, and the reports carry its limiters alone."""
    cp = InProcessControlPlane(policies(3, topics=_topics(21)), interval_s=1.0, clock=clock.now_s)
    p = make_participant(clock, cp, interval_s=1.0)
    assert p.report_now()
    for i in range(1, 21):                      # each earlier job: a producer, some sends, gone
        job = p.producer(f"t{i}/ns/topic")
        p.grant_keeper.run_once()
        assert job.try_acquire(msgs=10)
        del job
        gc.collect()
        clock.advance(0.05)
        p.grant_keeper.run_once()               # (its pool gives back: its producer is gone)
    live = p.producer("t0/ns/topic")
    assert len(p._pools()) == 21
    for _ in range(int(FORGET_IDLE_S) + 2):     # a minute of one live stream, a report a second
        p.grant_keeper.run_once()
        assert live.try_acquire(msgs=1)
        clock.advance(1.0)
        assert p.report_now()
    assert [pool.key for pool in p._pools()] == ["topic:publish:t0/ns/topic"]
    names = {(lim.level, lim.name) for lim in p.limits.limiters()}
    assert names == {(Level.BROKER, "broker"), (Level.TENANT, "t0"), (Level.NAMESPACE, "t0/ns"),
                     (Level.TOPIC, "t0/ns/topic")}
    assert {c.name for c in p.last_report().counters} <= {"broker", "t0", "t0/ns", "t0/ns/topic"}
    # a job on an old topic again: a new limiter, a pool under the same limit
    back = p.producer("t3/ns/topic")
    p.grant_keeper.run_once()
    sent = sum(1 for _ in range(2000) if back.try_acquire(msgs=1))
    assert 0 < sent <= 1000 * 1.05


@UNIT
def test_a_pool_that_holds_tokens_is_not_forgotten(clock: ManualClock) -> None:
    """Tokens a pool holds were granted: it is kept until it has given them back (its keeper does, when it can)."""
    cp = InProcessControlPlane(policies(3, topics=_topics(2)), interval_s=1.0, clock=clock.now_s)
    p = make_participant(clock, cp, interval_s=1.0)
    assert p.report_now()
    job = p.producer("t1/ns/topic")
    del job
    gc.collect()
    pool = p.limits.limiter(Level.TOPIC, "t1/ns/topic")
    pool.deposit(msgs=40)                       # held, and no keeper runs to give it back
    for _ in range(int(FORGET_IDLE_S) + 2):
        clock.advance(1.0)
        assert p.report_now()
    assert p.limits.limiter(Level.TOPIC, "t1/ns/topic") is pool
    p.grant_keeper.run_once()                   # given back now
    assert (pool.balance()[0] or 0.0) <= 1e-9
    for _ in range(int(FORGET_IDLE_S) + 2):
        clock.advance(1.0)
        assert p.report_now()
    assert (Level.TOPIC, "t1/ns/topic") not in {(lim.level, lim.name) for lim in p.limits.limiters()}
