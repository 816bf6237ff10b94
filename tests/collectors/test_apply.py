"""Policies and grants -> local limiters, on a ManualClock (collectors.apply)."""

from __future__ import annotations

from typing import Any

import pytest

from collectors.apply import UNLIMITED_MUTATIONS_PER_S, Applier, Limit, PolicyView
from collectors.dispatching import DispatchLimits
from collectors.grants import NOTHING, OUTAGE_SWITCH_S, SAFE_BURST_S
from limiter import ManualClock, PublishLimits
from limiter.mutation import MutationQuotaRegistry
from limiter.offload import OffloadThrottle
from limiter.policy import Level, Rate
from limiter.quota import Strategy
from protocol import Grant, PolicySet

pytestmark = pytest.mark.unit

ME = "me"


def policies(**kw: Any) -> PolicySet:
    settings = kw.pop("brokerSettings", {})
    return PolicySet.model_validate({"version": kw.pop("version", 7), "brokerSettings": settings, **kw})


def test_topic_limit_by_precedence_topic_then_namespace_then_broker_default() -> None:
    ps = policies(brokerSettings={"maxPublishRatePerTopicInMessages": 50},
                  namespaces={"acme/web": {"publishRate": {"publishThrottlingRateInMsg": 30}}},
                  topics={"acme/web/a": {"publishRate": {"publishThrottlingRateInMsg": 10, "ratePeriodInSecond": 2}}})
    view = PolicyView(ps)
    assert view.limit(Level.TOPIC, "publish", "acme/web/a") == Limit(Rate(10, -1, 2), True, Strategy.FAIR, "topic")
    assert view.limit(Level.TOPIC, "publish", "acme/web/b").rate == Rate(30)
    assert view.limit(Level.TOPIC, "publish", "acme/web/b").source == "namespace"
    assert view.limit(Level.TOPIC, "publish", "acme/other/c").rate == Rate(50)
    assert view.limit(Level.TOPIC, "publish", "acme/other/c").source == "broker"
    nothing = PolicyView(policies()).limit(Level.TOPIC, "publish", "acme/web/a")
    assert nothing.rate.is_unlimited and nothing.source is None
    # a namespace policy is a per-topic default, never a namespace total
    assert view.limit(Level.NAMESPACE, "publish", "acme/web").rate.is_unlimited


def test_a_view_works_each_limit_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from protocol import rules

    ps = policies(namespaces={"acme/web": {"publishRate": {"publishThrottlingRateInMsg": 30}}})
    view = PolicyView(ps)
    worked: list[tuple] = []
    original = rules.PolicyView._limit
    monkeypatch.setattr(rules.PolicyView, "_limit", lambda self, *key: (worked.append(key), original(self, *key))[1])
    first = view.limit(Level.TOPIC, "publish", "acme/web/b")
    assert view.limit(Level.TOPIC, "publish", "acme/web/b") is first and len(worked) == 1   # the keeper's 20-ms beat
    assert PolicyView(ps).limit(Level.TOPIC, "publish", "acme/web/b") == first and len(worked) == 2   # a new view
    changed = PolicyView(policies(namespaces={"acme/web": {"publishRate": {"publishThrottlingRateInMsg": 9}}}))
    assert changed.limit(Level.TOPIC, "publish", "acme/web/b").rate == Rate(9)           # new policies, new answer


def test_dispatch_and_subscription_precedence() -> None:
    ps = policies(brokerSettings={"dispatchThrottlingRatePerSubscriptionInMsg": 40,
                                  "dispatchThrottlingRatePerTopicInMsg": 400},
                  namespaces={"acme/web": {"subscriptionDispatchRate": {"dispatchThrottlingRateInMsg": 20}}},
                  topics={"acme/web/a": {"subscriptionDispatchRate": {"dispatchThrottlingRateInMsg": 5},
                                         "dispatchRate": {"dispatchThrottlingRateInByte": 1000}}},
                  subscriptions={"acme/web/a/own": {"dispatchRate": {"dispatchThrottlingRateInMsg": 2}},
                                 "acme/x/b/own": {"dispatchRate": {"dispatchThrottlingRateInMsg": 3}}})
    view = PolicyView(ps)
    own = view.limit(Level.SUBSCRIPTION, "dispatch", "acme/web/a/own")     # its own dispatchRate wins
    assert (own.rate, own.source) == (Rate(2), "subscription")
    assert view.limit(Level.SUBSCRIPTION, "dispatch", "acme/x/b/own").rate == Rate(3)   # over the broker default
    assert view.limit(Level.SUBSCRIPTION, "dispatch", "acme/web/a/sub").rate == Rate(5)
    assert view.limit(Level.SUBSCRIPTION, "dispatch", "acme/web/a/team/sub").rate == Rate(5)   # '/' in the name
    assert view.limit(Level.SUBSCRIPTION, "dispatch", "acme/web/b/sub").rate == Rate(20)
    assert view.limit(Level.SUBSCRIPTION, "dispatch", "acme/x/b/sub").rate == Rate(40)
    assert view.limit(Level.TOPIC, "dispatch", "acme/web/a").rate == Rate(-1, 1000)
    assert view.limit(Level.TOPIC, "dispatch", "acme/web/b").rate == Rate(400)
    assert view.limit(Level.SUBSCRIPTION, "publish", "acme/web/a/sub").rate.is_unlimited


def test_groups_tenants_and_the_broker_level() -> None:
    ps = policies(resourceGroups={"g1": {"publishRateInMsgs": 1000, "dispatchRateInBytes": 5e6},
                                  "g2": {"publishRateInMsgs": 10, "quotaStrategy": "proportional"}},
                  namespaceResourceGroups={"acme/web": "g1"}, tenantResourceGroups={"acme": "g2"},
                  tenants={"acme": {"publishRate": {"publishThrottlingRateInMsg": 3000}}},
                  brokerSettings={"brokerPublishThrottlingMaxMessageRate": 70, "dispatchThrottlingRateInMsg": 80})
    view = PolicyView(ps)
    assert view.resource_group_of("acme/web/t") == "g1"      # the namespace's group wins
    assert view.resource_group_of("acme/other/t") == "g2"    # else the tenant's
    assert view.resource_group_of("beta/x/t") is None
    topical = PolicyView(policies(**{**ps.model_dump(), "topicResourceGroups": {"acme/web/t": "g2"}}))
    assert topical.resource_group_of("acme/web/t") == "g2"     # the topic's own group wins over its namespace's
    assert topical.resource_group_of("acme/web/u") == "g1"
    assert topical.attachments()[(Level.TOPIC, "acme/web/t")] == "g2"
    g1 = view.limit(Level.RESOURCE_GROUP, "publish", "g1")
    assert (g1.rate, g1.shared, g1.strategy) == (Rate(1000), True, Strategy.FAIR)
    assert view.limit(Level.RESOURCE_GROUP, "dispatch", "g1").rate == Rate(-1, 5e6)
    assert view.limit(Level.RESOURCE_GROUP, "publish", "g2").strategy is Strategy.PROPORTIONAL
    assert view.limit(Level.RESOURCE_GROUP, "publish", "deleted").rate.is_unlimited
    assert view.limit(Level.TENANT, "publish", "acme").rate == Rate(3000)
    assert view.limit(Level.TENANT, "dispatch", "acme").rate.is_unlimited
    broker = view.limit(Level.BROKER, "publish", "broker")
    assert (broker.rate, broker.shared) == (Rate(70), False)     # per participant, never shared
    assert view.limit(Level.BROKER, "dispatch", "broker").rate == Rate(80)


@pytest.mark.parametrize("group_choice,default,expected", [
    (None, None, "fair"), (None, "proportional", "proportional"), ("fair", "proportional", "fair"),
    ("proportional", None, "proportional"), ("newer-strategy", None, "fair")])
def test_strategy_of_a_group(group_choice: str | None, default: str | None, expected: str) -> None:
    rg: dict[str, Any] = {"publishRateInMsgs": 10}
    if group_choice:
        rg["quotaStrategy"] = group_choice
    ps = policies(resourceGroups={"g": rg}, brokerSettings={"defaultQuotaStrategy": default} if default else {})
    assert PolicyView(ps).limit(Level.RESOURCE_GROUP, "publish", "g").strategy == Strategy(expected)


@pytest.fixture
def world(clock: ManualClock) -> dict[str, Any]:
    limits = PublishLimits(clock, resolution_s=0)
    dispatch = DispatchLimits(clock)
    offload = OffloadThrottle(-1, clock=clock)
    mutations = MutationQuotaRegistry(clock=clock)
    applier = Applier(ME, limits, dispatch, offload, mutations)
    return {"limits": limits, "dispatch": dispatch, "offload": offload, "mutations": mutations, "applier": applier}


GROUPED = dict(resourceGroups={"g": {"publishRateInMsgs": 1000, "dispatchRateInMsgs": 200}},
               namespaceResourceGroups={"acme/web": "g"},
               brokerSettings={"brokerPublishThrottlingMaxMessageRate": 5000, "maxPublishRatePerTopicInMessages": 800,
                               "managedLedgerOffloadBrokerFlowPermitsPerSecond": 1e6,
                               "preciseDispatcherFlowControl": True},
               mutationQuotas=[{"user": "alice", "clientId": "<default>", "quotaPerSecond": 5, "samples": 2},
                               {"user": "root", "clientId": "<default>", "quotaPerSecond": -1}])


def test_applier_sets_every_level_and_the_per_participant_settings(world: dict[str, Any]) -> None:
    limits, applier = world["limits"], world["applier"]
    producer = limits.producer("acme/web/clicks")
    assert [lim.level for lim in producer.limiters] == [Level.BROKER, Level.TENANT, Level.NAMESPACE, Level.TOPIC]
    applier.apply(policies(**GROUPED))
    assert applier.version == 7
    levels = {lim.level: lim for lim in producer.limiters}
    assert Level.RESOURCE_GROUP in levels                                  # attached: producer rebound
    group = levels[Level.RESOURCE_GROUP]
    assert group.rate == Rate(NOTHING) and group.capacity == (1000, 0)     # shared: a pool of up to 1000 msgs
    assert group.balance()[0] == pytest.approx(0, abs=1e-3) and group.balance()[1] is None   # nothing granted yet
    group.deposit(msgs=250)
    assert group.balance()[0] == pytest.approx(250)
    assert levels[Level.BROKER].rate == Rate(5000) and levels[Level.BROKER].capacity is None
    assert levels[Level.TOPIC].capacity == (800, 0)      # the broker's default per topic: a topic spans workers
    assert levels[Level.TENANT].rate.is_unlimited and levels[Level.NAMESPACE].rate.is_unlimited
    assert world["offload"].bytes_per_s == 1e6
    assert world["dispatch"].options["precise_dispatcher_flow_control"] is True
    alice = world["mutations"].get("alice", "app")
    assert alice is not None and alice.quota_per_s == 5 and alice.samples == 2
    assert world["mutations"].get("root", "x").quota_per_s == UNLIMITED_MUTATIONS_PER_S
    assert world["mutations"].get("bob", "x") is None
    # a topic-level group: the producer is rebound to it, over its namespace's
    applier.apply(policies(version=8, **{**GROUPED, "resourceGroups": {**GROUPED["resourceGroups"], "t": {}},
                                         "topicResourceGroups": {"acme/web/clicks": "t"}}))
    assert [lim.name for lim in producer.limiters if lim.level is Level.RESOURCE_GROUP] == ["t"]
    # detached: the producer is no longer under the group
    applier.apply(policies(version=9, **{**GROUPED, "namespaceResourceGroups": {}}))
    assert Level.RESOURCE_GROUP not in {lim.level for lim in producer.limiters}


def test_a_limiter_created_later_starts_as_an_empty_pool(world: dict[str, Any]) -> None:
    limits, applier, dispatch = world["limits"], world["applier"], world["dispatch"]
    applier.apply(policies(**GROUPED))
    producer = limits.producer("acme/web/later")        # created between two answers
    applier.refresh()
    levels = {lim.level: lim for lim in producer.limiters}
    assert levels[Level.RESOURCE_GROUP].capacity == (1000, 0) and levels[Level.RESOURCE_GROUP].balance()[0] == pytest.approx(0, abs=1e-3)
    assert levels[Level.TOPIC].capacity == (800, 0)
    rg = dispatch.limiter(Level.RESOURCE_GROUP, "g")
    applier.refresh()
    assert rg.capacity == (200, 0) and rg.balance()[0] == pytest.approx(0, abs=1e-3)
    rg.deposit(50)
    assert rg.available_msgs() == pytest.approx(50)
    sub = dispatch.dispatcher("acme/web/later", "s1", "g")
    assert [lim.level for lim in sub.levels] == [Level.BROKER, Level.TOPIC, Level.SUBSCRIPTION, Level.RESOURCE_GROUP]


def test_an_unreachable_control_plane_turns_pools_into_the_safe_rate_after_a_moment(
        world: dict[str, Any], clock: ManualClock) -> None:
    limits, applier = world["limits"], world["applier"]
    rg = limits.limiter(Level.RESOURCE_GROUP, "g")
    applier.apply(policies(**GROUPED))
    ask = applier.grants.ask("resource_group:publish:g", (250, 0))
    applier.grants.record(ask, Grant(level="resource_group", name="g", direction="publish", msgs=250, chunk_msgs=250,
                                     safe_msgs_per_s=400, retry_s=0, holders=2), clock.now_ns() / 1e9)
    rg.deposit(msgs=250)
    applier.grants.unreachable()
    applier.refresh()
    assert rg.capacity == (1000, 0) and rg.balance()[0] == pytest.approx(250)   # the pool is spent first
    clock.advance(OUTAGE_SWITCH_S)
    applier.refresh()
    assert rg.rate == Rate(400) and rg.capacity is None and rg.burst_s == SAFE_BURST_S   # then the static split
    assert rg.holds_when_dry           # ... whose debt a new task's producer waits out
    applier.grants.reachable()
    applier.refresh()
    assert rg.capacity == (1000, 0)                                              # back: the pool again
    assert rg.holds_when_dry and rg.burst_s is None
    never = limits.limiter(Level.TENANT, "acme")   # no tenant limit: untouched by all of this
    assert never.rate.is_unlimited


def test_a_refresh_leaves_an_unchanged_limiter_alone(world: dict[str, Any], clock: ManualClock) -> None:
    # re-applying an unchanged pool re-planned its producers' release from the pool's refill time (it has none):
    # on the keeper's thread, between a deposit and the release it scheduled, a producer waiting on the dry pool
    # then stayed paused until the control plane was given up on (2.4 s in the slow-network test)
    limits, applier = world["limits"], world["applier"]
    applier.apply(policies(**GROUPED))
    rg = limits.limiter(Level.RESOURCE_GROUP, "g")
    applier.refresh()
    applied = []
    real = rg.update_rate
    rg.update_rate = lambda *a, **kw: (applied.append(a), real(*a, **kw))
    applier.refresh()
    assert applied == []                                          # a pool, as it was
    applier.grants.unreachable()
    clock.advance(OUTAGE_SWITCH_S)
    applier.refresh()
    assert len(applied) == 1 and rg.holds_when_dry                # the static split, once
    applier.refresh()
    assert len(applied) == 1                                      # ... and left alone after


def test_an_operators_change_is_applied_exactly(world: dict[str, Any]) -> None:
    limits, applier = world["limits"], world["applier"]
    applier.apply(policies(**GROUPED))
    topic = limits.limiter(Level.TOPIC, "acme/web/t")
    changed = {**GROUPED, "brokerSettings": {**GROUPED["brokerSettings"], "maxPublishRatePerTopicInMessages": 801}}
    applier.apply(policies(version=9, **changed))
    assert topic.capacity == (801, 0)
    rg = limits.limiter(Level.RESOURCE_GROUP, "g")
    applier.apply(policies(version=10, **{**changed, "resourceGroups": {"g": {"publishRateInMsgs": 300}}}))
    assert rg.capacity == (300, 0)                        # the pool follows the group's limit


def test_nothing_is_touched_before_the_first_policies(world: dict[str, Any]) -> None:
    limits, applier = world["limits"], world["applier"]
    limits.set_limit(Level.BROKER, "broker", Rate(42))     # a local static limit
    applier.refresh()
    applier.apply()
    assert limits.limiter(Level.BROKER).rate == Rate(42) and applier.version == 0
    assert applier.target(Level.BROKER, "publish", "broker") is None
