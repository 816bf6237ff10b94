import pytest

from limiter import Level, PolicyError, PublishLimits, Rate, ThrottleReason, split_topic

pytestmark = pytest.mark.unit


@pytest.fixture
def limits(clock):
    return PublishLimits(clock=clock)


def test_topic_limit_precedence_topic_over_namespace_over_broker_default(limits):
    topic = "acme/web/clicks"
    assert limits.effective_topic_rate(topic) == (Rate.unlimited(), None)
    limits.set_topic_policy(Level.BROKER, None, Rate(msgs=100))
    assert limits.effective_topic_rate(topic) == (Rate(msgs=100), Level.BROKER)
    limits.set_topic_policy(Level.NAMESPACE, "acme/web", Rate(msgs=50))
    assert limits.effective_topic_rate(topic) == (Rate(msgs=50), Level.NAMESPACE)
    assert limits.effective_topic_rate("acme/other/x") == (Rate(msgs=100), Level.BROKER)
    limits.set_topic_policy(Level.TOPIC, topic, Rate(msgs=10))
    assert limits.effective_topic_rate(topic) == (Rate(msgs=10), Level.TOPIC)
    limits.set_topic_policy(Level.TOPIC, topic, None)
    assert limits.effective_topic_rate(topic) == (Rate(msgs=50), Level.NAMESPACE)


def test_policy_changes_reach_existing_topic_limiters_live(limits):
    p = limits.producer("acme/web/clicks")
    limits.set_topic_policy(Level.NAMESPACE, "acme/web", Rate(msgs=5))
    assert limits.limiter(Level.TOPIC, "acme/web/clicks").rate == Rate(msgs=5)
    for _ in range(5):
        p.try_acquire()
    assert p.paused
    limits.set_topic_policy(Level.TOPIC, "acme/web/clicks", Rate(msgs=500))  # raised: resumes at once
    assert not p.paused


def test_a_producer_is_wired_to_every_level_in_order(limits):
    p = limits.producer("acme/web/clicks", name="task-1")
    assert [(lim.level, lim.name) for lim in p.limiters] == [
        (Level.BROKER, "broker"), (Level.TENANT, "acme"), (Level.NAMESPACE, "acme/web"),
        (Level.TOPIC, "acme/web/clicks")]
    assert p.name == "task-1"


def test_resource_group_of_the_namespace_wins_over_the_tenants_and_rebinds_producers(limits):
    p = limits.producer("acme/web/clicks")
    limits.attach_resource_group(Level.TENANT, "acme", "silver")
    assert ("resource_group", "silver") in [(lim.level.value, lim.name) for lim in p.limiters]
    limits.attach_resource_group(Level.NAMESPACE, "acme/web", "gold")
    groups = [lim.name for lim in p.limiters if lim.level is Level.RESOURCE_GROUP]
    assert groups == ["gold"]
    assert limits.resource_group_of("acme/other/x") == "silver"
    limits.attach_resource_group(Level.NAMESPACE, "acme/web", None)
    assert [lim.name for lim in p.limiters if lim.level is Level.RESOURCE_GROUP] == ["silver"]


def test_resource_group_of_the_topic_wins_over_its_namespaces_and_tenants(limits):
    clicks, views = limits.producer("acme/web/clicks"), limits.producer("acme/web/views")
    limits.attach_resource_group(Level.TENANT, "acme", "silver")
    limits.attach_resource_group(Level.NAMESPACE, "acme/web", "gold")
    limits.attach_resource_group(Level.TOPIC, "acme/web/clicks", "platinum")
    assert limits.resource_group_of("acme/web/clicks") == "platinum"
    assert [lim.name for lim in clicks.limiters if lim.level is Level.RESOURCE_GROUP] == ["platinum"]
    assert [lim.name for lim in views.limiters if lim.level is Level.RESOURCE_GROUP] == ["gold"]
    limits.attach_resource_group(Level.TOPIC, "acme/web/clicks", None)
    assert [lim.name for lim in clicks.limiters if lim.level is Level.RESOURCE_GROUP] == ["gold"]


@pytest.mark.parametrize("level, reason", [
    (Level.BROKER, ThrottleReason.BROKER_RATE), (Level.TENANT, ThrottleReason.TENANT_RATE),
    (Level.NAMESPACE, ThrottleReason.NAMESPACE_RATE), (Level.RESOURCE_GROUP, ThrottleReason.RESOURCE_GROUP_RATE),
])
def test_any_one_level_pauses_the_producer_and_names_itself(limits, clock, level, reason):
    name = {Level.BROKER: "broker", Level.TENANT: "acme", Level.NAMESPACE: "acme/web",
            Level.RESOURCE_GROUP: "gold"}[level]
    limits.attach_resource_group(Level.TENANT, "acme", "gold")
    limits.set_limit(level, name, Rate(msgs=3))
    p = limits.producer("acme/web/clicks")
    for _ in range(3):
        p.try_acquire()
    assert p.paused and p.tracker.reasons() == {reason: 1}
    clock.advance(1)
    assert not p.paused


def test_paused_until_every_level_has_cleared(limits, clock):
    limits.set_limit(Level.BROKER, "broker", Rate(msgs=10))
    limits.set_topic_policy(Level.TOPIC, "acme/web/clicks", Rate(msgs=2))
    p = limits.producer("acme/web/clicks")
    p.try_acquire(10)  # both exhausted: broker 0, topic -8
    assert p.tracker.reasons() == {ThrottleReason.BROKER_RATE: 1, ThrottleReason.TOPIC_RATE: 1}
    clock.advance(0.1)  # broker back to 1 token; topic still in debt
    assert p.paused and p.tracker.reasons() == {ThrottleReason.TOPIC_RATE: 1}
    clock.advance(5)
    assert not p.paused


def test_unrelated_topics_do_not_throttle_each_other(limits):
    limits.set_topic_policy(Level.TOPIC, "acme/web/slow", Rate(msgs=1))
    slow, fast = limits.producer("acme/web/slow"), limits.producer("acme/web/fast")
    slow.try_acquire(5)
    assert slow.paused
    assert all(fast.try_acquire() for _ in range(1000))


def test_partitions_are_topics_of_their_own(limits):
    limits.set_topic_policy(Level.NAMESPACE, "acme/web", Rate(msgs=2))
    p0, p1 = limits.producer("acme/web/t-partition-0"), limits.producer("acme/web/t-partition-1")
    p0.try_acquire(2)
    assert p0.paused and not p1.paused


def test_snapshots_cover_every_limiter(limits):
    limits.producer("acme/web/clicks").try_acquire(1, 10)
    snaps = {(s.level, s.name): s for s in limits.snapshots()}
    assert set(snaps) == {("broker", "broker"), ("tenant", "acme"), ("namespace", "acme/web"),
                          ("topic", "acme/web/clicks")}
    assert all(s.admitted_msgs == 1 and s.admitted_bytes == 10 for s in snaps.values())


@pytest.mark.parametrize("topic", ["acme/web", "acme//x", "", "a/b/c/d"])
def test_bad_topic_names_are_explained(topic):
    with pytest.raises(PolicyError, match="tenant/namespace/topic"):
        split_topic(topic)


def test_levels_are_used_where_they_belong(limits):
    with pytest.raises(PolicyError, match="set_topic_policy"):
        limits.set_limit(Level.TOPIC, "acme/web/x", Rate(msgs=1))
    with pytest.raises(PolicyError, match="a tenant, a namespace or a topic, not a subscription"):
        limits.attach_resource_group(Level.SUBSCRIPTION, "acme/web/x/s", "gold")
    with pytest.raises(PolicyError, match="topic, namespace or broker"):
        limits.set_topic_policy(Level.TENANT, "acme", Rate(msgs=1))
    assert split_topic("persistent://acme/web/x") == ("acme", "acme/web", "acme/web/x")


def test_paths_name_the_other_limiters_each_live_producer_of_a_limiter_passes(limits):
    clicks, views = limits.producer("acme/web/clicks"), limits.producer("acme/web/views")
    tenant = limits.bound()[(Level.TENANT, "acme")].paths
    assert len(tenant) == 2                                            # one path per producer
    assert sorted((Level.TOPIC, "acme/web/clicks") in p for p in tenant) == [False, True]
    assert all((Level.TENANT, "acme") not in p for p in tenant)      # not itself
    assert clicks and views


def _coming(limits) -> dict:
    """(level, name) -> what its live producers said they have in hand (None: one of them never said)."""
    return {key: bound.coming_msgs for key, bound in limits.bound().items()}


def test_coming_msgs_adds_up_what_each_live_producer_has_in_hand_per_limiter(limits):
    a, b = limits.producer("acme/web/clicks"), limits.producer("acme/web/views")
    c = limits.producer("acme/web/clicks")
    a.will_send(62)
    b.will_send(40)
    coming = _coming(limits)
    assert coming[(Level.TOPIC, "acme/web/views")] == 40
    assert coming[(Level.TOPIC, "acme/web/clicks")] is None   # one of its producers never said: not known
    assert coming[(Level.TENANT, "acme")] is None
    c.will_send(10)
    coming = _coming(limits)
    assert coming[(Level.TOPIC, "acme/web/clicks")] == 72 and coming[(Level.TENANT, "acme")] == 112
    del a   # a producer gone (its task ended): what it said is no longer coming
    assert limits.bound()[(Level.TOPIC, "acme/web/clicks")].coming_msgs == 10
    c.acquire(10)
    assert limits.bound()[(Level.TOPIC, "acme/web/clicks")].coming_msgs == 0   # said, and all of it sent
