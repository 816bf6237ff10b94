"""Policies and usage maps -> local limiter rates, on a ManualClock (collectors.apply)."""

from __future__ import annotations

from typing import Any

import pytest

from collectors.apply import UNLIMITED_MUTATIONS_PER_S, Applier, Limit, PolicyView, local_share
from collectors.dispatching import DispatchLimits
from limiter import ManualClock, PublishLimits
from limiter.mutation import MutationQuotaRegistry
from limiter.offload import OffloadThrottle
from limiter.policy import Level, Rate
from limiter.quota import Strategy
from metrics.report import PolicySet, UsageValues

pytestmark = pytest.mark.unit

ME = "me"


def policies(**kw: Any) -> PolicySet:
    settings = kw.pop("brokerSettings", {})
    return PolicySet.model_validate({"version": kw.pop("version", 7), "brokerSettings": settings, **kw})


def uv(usage: float, demand: float | None = None, ub: float = 0, db: float | None = None) -> UsageValues:
    return UsageValues(usage_msgs_per_s=usage, demand_msgs_per_s=usage if demand is None else demand,
                       usage_bytes_per_s=ub, demand_bytes_per_s=ub if db is None else db)


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


def test_dispatch_and_subscription_precedence() -> None:
    ps = policies(brokerSettings={"dispatchThrottlingRatePerSubscriptionInMsg": 40,
                                  "dispatchThrottlingRatePerTopicInMsg": 400},
                  namespaces={"acme/web": {"subscriptionDispatchRate": {"dispatchThrottlingRateInMsg": 20}}},
                  topics={"acme/web/a": {"subscriptionDispatchRate": {"dispatchThrottlingRateInMsg": 5},
                                         "dispatchRate": {"dispatchThrottlingRateInByte": 1000}}})
    view = PolicyView(ps)
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


def test_local_share_fair_proportional_alone_and_unshared() -> None:
    fair = Limit(Rate(1000), True, Strategy.FAIR)
    start = {ME: uv(700, 700), "b": uv(300, 700)}      # 70/30, both want 700
    assert local_share(fair, ME, start).msgs == pytest.approx(500)
    assert local_share(fair, "b", start).msgs == pytest.approx(500)
    prop = Limit(Rate(1000), True, Strategy.PROPORTIONAL)
    assert local_share(prop, ME, start).msgs == pytest.approx(700)
    assert local_share(prop, "b", start).msgs == pytest.approx(300)
    assert local_share(fair, ME, {}) == Rate(1000)                        # no map yet: the whole limit
    assert local_share(fair, ME, {ME: uv(10)}).msgs == pytest.approx(1000)  # alone: the whole limit
    assert local_share(prop, ME, {ME: uv(10)}).msgs == pytest.approx(1000)
    broker = Limit(Rate(70), False)
    assert local_share(broker, ME, start) == Rate(70)                     # not shared: the map is ignored
    assert local_share(Limit(Rate.unlimited(), True), ME, start).is_unlimited


def test_local_share_per_dimension_and_period() -> None:
    limit = Limit(Rate(600, 6e6, 60), True)            # 10 msgs/s and 100 kB/s, per minute
    peers = {ME: uv(8, 20, 1e5, 1e5), "b": uv(2, 20, 0, 0)}
    share = local_share(limit, ME, peers)
    assert share.period_s == 60 and share.msgs == pytest.approx(300)    # 5 msgs/s of 10
    assert share.bytes == pytest.approx(6e6 - 60)                          # b wants no bytes: floor 1 B/s
    only_msgs = local_share(Limit(Rate(100), True), ME, peers)
    assert only_msgs.bytes == -1


def test_a_participant_missing_from_the_map_is_added_with_nothing() -> None:
    share = local_share(Limit(Rate(100), True), ME, {"b": uv(50, 50), "c": uv(50, 50)})
    assert share.msgs == pytest.approx(1.0)   # min share: b and c want all of it


@pytest.fixture
def world(clock: ManualClock) -> dict[str, Any]:
    limits = PublishLimits(clock, resolution_s=0)
    dispatch = DispatchLimits(clock)
    offload = OffloadThrottle(-1, clock=clock)
    mutations = MutationQuotaRegistry(clock=clock)
    applier = Applier(ME, limits, dispatch, offload, mutations)
    applier.shared_burst_s = 0.25
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
    assert levels[Level.RESOURCE_GROUP].rate == Rate(1000)                 # alone: the whole group
    assert levels[Level.RESOURCE_GROUP].burst_s == 0.25                    # shared: one interval of burst
    assert levels[Level.RESOURCE_GROUP].snapshot().buckets[0].capacity == pytest.approx(250)
    assert levels[Level.BROKER].rate == Rate(5000) and levels[Level.BROKER].burst_s is None
    assert levels[Level.TOPIC].rate == Rate(800)
    assert levels[Level.TENANT].rate.is_unlimited and levels[Level.NAMESPACE].rate.is_unlimited
    assert world["offload"].bytes_per_s == 1e6
    assert world["dispatch"].options["precise_dispatcher_flow_control"] is True
    alice = world["mutations"].get("alice", "app")
    assert alice is not None and alice.quota_per_s == 5 and alice.samples == 2
    assert world["mutations"].get("root", "x").quota_per_s == UNLIMITED_MUTATIONS_PER_S
    assert world["mutations"].get("bob", "x") is None
    # the usage map: the group's share for this participant
    applier.apply(usage_map={"resource_group:publish:g": {ME: uv(300, 700), "b": uv(700, 700)}},
                  mine={"resource_group:publish:g": uv(300, 700)})
    assert levels[Level.RESOURCE_GROUP].rate.msgs == pytest.approx(500)
    assert levels[Level.RESOURCE_GROUP].snapshot().buckets[0].capacity == pytest.approx(125)
    # detached: the producer is no longer under the group
    applier.apply(policies(version=8, **{**GROUPED, "namespaceResourceGroups": {}}))
    assert Level.RESOURCE_GROUP not in {lim.level for lim in producer.limiters}


def test_a_limiter_created_later_starts_at_its_target(world: dict[str, Any]) -> None:
    limits, applier, dispatch = world["limits"], world["applier"], world["dispatch"]
    applier.apply(policies(**GROUPED), {"resource_group:publish:g": {ME: uv(10, 10), "b": uv(600, 1500)}},
                  {"resource_group:publish:g": uv(10, 10)})
    producer = limits.producer("acme/web/later")        # created between two answers
    levels = {lim.level: lim for lim in producer.limiters}
    assert levels[Level.RESOURCE_GROUP].rate.msgs == pytest.approx(10)   # fair: 10 of 1000 (b wants 1500)
    assert levels[Level.TOPIC].rate == Rate(800)
    assert dispatch.limiter(Level.RESOURCE_GROUP, "g").rate == Rate(200)
    sub = dispatch.dispatcher("acme/web/later", "s1", "g")
    assert [lim.level for lim in sub.levels] == [Level.BROKER, Level.TOPIC, Level.SUBSCRIPTION, Level.RESOURCE_GROUP]


def test_small_moves_of_a_share_are_not_applied_exact_policy_changes_are(world: dict[str, Any]) -> None:
    limits, applier = world["limits"], world["applier"]
    rg = limits.limiter(Level.RESOURCE_GROUP, "g")
    key = "resource_group:publish:g"
    applier.apply(policies(**GROUPED), {key: {ME: uv(500, 700), "b": uv(500, 700)}}, {key: uv(500, 700)})
    assert rg.rate.msgs == pytest.approx(500)
    applier.apply(usage_map={key: {ME: uv(500, 700), "b": uv(498, 498)}}, mine={key: uv(500, 700)})
    assert rg.rate.msgs == pytest.approx(500)            # 502 is a 0.4 % move: noise, not applied
    applier.apply(usage_map={key: {ME: uv(500, 700), "b": uv(400, 400)}}, mine={key: uv(500, 700)})
    assert rg.rate.msgs == pytest.approx(600)            # a real move is applied
    topic = limits.limiter(Level.TOPIC, "acme/web/t")
    changed = {**GROUPED, "brokerSettings": {**GROUPED["brokerSettings"], "maxPublishRatePerTopicInMessages": 801}}
    applier.apply(policies(version=9, **changed))
    assert topic.rate == Rate(801)                       # an operator's change is applied exactly


def test_after_a_reconnection_missing_peers_are_kept_for_the_grace_period(world: dict[str, Any],
                                                                          clock: ManualClock) -> None:
    limits, applier = world["limits"], world["applier"]
    rg = limits.limiter(Level.RESOURCE_GROUP, "g")
    key = "resource_group:publish:g"
    applier.apply(policies(**GROUPED), {key: {ME: uv(500, 700), "b": uv(500, 700)}}, {key: uv(500, 700)})
    assert rg.rate.msgs == pytest.approx(500)
    applier.begin_grace(2.0)                             # a restarted control plane knows only me so far
    applier.apply(usage_map={key: {ME: uv(500, 700)}}, mine={key: uv(500, 700)})
    assert rg.rate.msgs == pytest.approx(500)            # b is kept: no burst to the whole limit
    clock.advance(2.5)
    applier.apply(usage_map={key: {ME: uv(500, 700)}}, mine={key: uv(500, 700)})
    assert rg.rate.msgs == pytest.approx(1000)           # b really left: its share comes back
    # outside a grace period the map is trusted as it is
    applier.apply(usage_map={key: {ME: uv(500, 700), "c": uv(0, 1000)}}, mine={key: uv(500, 700)})
    assert rg.rate.msgs == pytest.approx(500)


def test_nothing_is_touched_before_the_first_policies(world: dict[str, Any]) -> None:
    limits, applier = world["limits"], world["applier"]
    limits.set_limit(Level.BROKER, "broker", Rate(42))     # a local static limit
    applier.refresh()
    applier.apply(usage_map={}, mine={})
    assert limits.limiter(Level.BROKER).rate == Rate(42) and applier.version == 0
    assert applier.target(Level.BROKER, "publish", "broker") is None
