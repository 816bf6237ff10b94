"""The collector on a fresh registry over a real LiveState (manual clock): aggregation across participants,
departures and resets never making a total go backwards, folded topic labels, resource groups, policy versions,
and every family matching the catalogue."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.grants import GrantBook
from limiter import ManualClock
from metrics.catalogue import BY_NAME, CATALOGUE, PREFIX
from protocol import GrantAsk, Outcomes, PolicySet, ResourceGroup, limit_key

from .conftest import Env, bucket, counters, report

pytestmark = pytest.mark.unit
CLICKS = {"level": "topic", "kind": "publish", "name": "acme/web/clicks"}
CLICKS_MSGS = {**CLICKS, "dimension": "msgs"}


def test_gauges_combine_across_participants_as_the_catalogue_says(make_env) -> None:
    env: Env = make_env()
    env.send(report(env, "a", 1, buckets=[bucket(tokens=5, rate=20, capacity=20, period_s=2)],
                    queues=[{"level": "topic", "name": "acme/web/clicks", "length": 3,
                             "entries": [{"producer": "p1", "waiting_s": 0.5}, {"producer": "p2", "waiting_s": 0.2}]}],
                    mutation_quotas=[{"user": "alice", "client_id": "etl", "tokens": -4, "rate": 3,
                                      "throttle_time_s": 0.8}],
                    offload={"limit_bytes_per_s": 1000, "reading_max_bytes": 700, "rate_bytes_per_s": 900}))
    env.send(report(env, "b", 1, buckets=[bucket(tokens=-3, rate=10, capacity=10)],
                    queues=[{"level": "topic", "name": "acme/web/clicks", "length": 1,
                             "entries": [{"producer": "p3", "waiting_s": 1.5}]}],
                    mutation_quotas=[{"user": "alice", "client_id": "etl", "tokens": 1, "rate": 2,
                                      "throttle_time_s": 0}],
                    offload={"reading_max_bytes": 300, "rate_bytes_per_s": 100}))
    assert env.value("throttlescope_bucket_tokens", **CLICKS_MSGS) == 2
    assert env.value("throttlescope_bucket_tokens_min", **CLICKS_MSGS) == -3
    assert env.value("throttlescope_bucket_rate", **CLICKS_MSGS) == 20  # 20 per 2 s + 10 per 1 s
    assert env.value("throttlescope_bucket_capacity", **CLICKS_MSGS) == 30
    assert env.value("throttlescope_bucket_participants", **CLICKS) == 2
    assert env.value("throttlescope_bucket_tokens", **{**CLICKS, "dimension": "bytes"}) is None  # unlimited
    assert env.value("throttlescope_queue_length", level="topic", name="acme/web/clicks") == 4
    assert env.value("throttlescope_queue_longest_wait_seconds", level="topic", name="acme/web/clicks") == 1.5
    assert env.value("throttlescope_mutation_tokens", user="alice", client_id="etl") == -3
    assert env.value("throttlescope_mutation_rate", user="alice", client_id="etl") == 5
    assert env.value("throttlescope_mutation_throttle_time_seconds", user="alice", client_id="etl") == 0.8
    assert env.value("brk_ledgeroffloader_ledger_reading_max_bytes") == 700
    assert env.value("brk_ledgeroffloader_offload_rate") == 1000
    assert env.value("throttlescope_offload_limit_bytes_per_second") == 1000  # only a has a limit
    assert env.value("throttlescope_participants") == 2


def test_counters_sum_over_participants_with_the_seed_and_reason_names(make_env) -> None:
    env: Env = make_env()
    env.send(report(env, "a", 1, counters=[counters(throttled=3, seconds=1.25, msgs=100, bytes_=1e4)],
                    dispatch_throttled={"topic": 2, "subscription": 5},
                    offload={"limited_total": 4, "offload_time_seconds_total": 2.5, "errors_total": 1,
                             "read_bytes_total": 5000}))
    env.send(report(env, "b", 1, counters=[counters(throttled=1, seconds=0.75, msgs=50, bytes_=5e3)],
                    dispatch_throttled={"subscription": 1}))
    assert env.value("throttlescope_throttled_total", **CLICKS) == 4
    assert env.value("throttlescope_throttle_time_seconds_total", **CLICKS) == 2.0
    assert env.value("throttlescope_admitted_messages_total", **CLICKS) == 150
    assert env.value("throttlescope_admitted_bytes_total", **CLICKS) == 15000
    assert env.value("throttlescope_dispatch_throttled_events_total", reason="subscription") == 6
    assert env.value("throttlescope_dispatch_throttled_events_total", reason="topic") == 2
    assert env.value("brk_ledgeroffloader_ledger_offload_limited_total") == 4
    assert env.value("brk_ledgeroffloader_ledger_offload_time_total") == 2.5
    assert env.value("brk_ledgeroffloader_offload_error_total") == 1
    assert env.value("throttlescope_offload_read_bytes_total") == 5000


def test_participants_that_leave_stop_being_exported_but_their_totals_stay(make_env) -> None:
    env: Env = make_env()
    env.send(report(env, "a", 1, buckets=[bucket(tokens=1)], counters=[counters(throttled=3, msgs=10)]))
    env.send(report(env, "b", 1, buckets=[bucket(tokens=2)], counters=[counters(throttled=4, msgs=20)]))
    assert env.value("throttlescope_participants_departed_total", reason="goodbye") == 0
    assert env.live.goodbye("a")
    assert env.value("throttlescope_bucket_tokens", **CLICKS_MSGS) == 2
    assert env.value("throttlescope_throttled_total", **CLICKS) == 7
    assert env.value("throttlescope_participants_departed_total", reason="goodbye") == 1
    env.advance(2.5)  # b is silent for more than 2 intervals: expired at the next access
    assert env.value("throttlescope_bucket_tokens", **CLICKS_MSGS) is None
    assert env.value("throttlescope_bucket_participants", **CLICKS) is None
    assert env.value("throttlescope_participants") == 0
    assert env.value("throttlescope_participants_departed_total", reason="expired") == 1
    assert env.value("throttlescope_throttled_total", **CLICKS) == 7
    assert env.value("throttlescope_admitted_messages_total", **CLICKS) == 30


def test_a_reset_or_vanished_counter_is_banked_so_the_total_never_goes_backwards(make_env) -> None:
    env: Env = make_env()
    seen = []
    for seq, c in enumerate([[counters(throttled=10)], [counters(throttled=3)],   # restarted limiter: 10 banked
                             [], [counters(throttled=1)], [counters(throttled=6)]], start=1):  # gone: 3 banked
        env.send(report(env, "a", seq, counters=c))
        seen.append(env.value("throttlescope_throttled_total", **CLICKS))
        env.advance(0.5)
    assert seen == [10, 13, 13, 14, 19]


def test_an_ignored_report_changes_nothing(make_env) -> None:
    env: Env = make_env()
    env.send(report(env, "a", 5, counters=[counters(throttled=10)]))
    accepted, _ = env.live.ingest(report(env, "a", 4, counters=[counters(throttled=1)]))  # out of sequence
    assert not accepted
    assert env.value("throttlescope_throttled_total", **CLICKS) == 10


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # a factory
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["add", "reset", "leave"]),
                          st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False)),
                max_size=40))
def test_totals_are_exact_and_never_decrease(make_env, ops) -> None:
    env: Env = make_env()
    lifetimes: list[float] = []               # last value of each ended counter lifetime (the model)
    value: dict[str, float] = {}              # participant id -> its counter now
    seq: dict[str, int] = {}
    ids = {p: p for p in "abc"}
    last = 0.0
    for who, op, x in ops:
        pid = ids[who]
        if op == "leave":
            if pid in value:
                env.live.goodbye(pid)
                lifetimes.append(value.pop(pid))
                ids[who] = pid + "'"
            continue
        if op == "reset" and value.get(pid, 0) > 0:  # restarts lower: what can be told from a report
            lifetimes.append(value[pid])
            value[pid] *= x / 2e12
        else:
            value[pid] = value.get(pid, 0.0) + x
        seq[pid] = seq.get(pid, 0) + 1
        env.send(report(env, pid, seq[pid], counters=[counters(seconds=value[pid])]))
        total = env.value("throttlescope_throttle_time_seconds_total", **CLICKS)
        assert total >= last
        assert total == math.fsum([*lifetimes, *value.values()])
        last = total


def test_per_topic_labels_can_be_switched_off(make_env) -> None:
    env: Env = make_env(topic_labels=False)
    env.send(report(env, "a", 1,
                    buckets=[bucket(tokens=2), bucket(name="acme/web/views", tokens=-5),
                             bucket(level="broker", name="broker", tokens=7)],
                    counters=[counters(throttled=2), counters(name="acme/web/views", throttled=3),
                              counters(level="subscription", name="acme/web/clicks/s", kind="dispatch", throttled=1)],
                    queues=[{"level": "topic", "name": "acme/web/clicks", "length": 1}]))
    star = {"level": "topic", "kind": "publish", "name": "*"}
    assert env.value("throttlescope_bucket_tokens", **star, dimension="msgs") == -3
    assert env.value("throttlescope_bucket_tokens_min", **star, dimension="msgs") == -5
    assert env.value("throttlescope_bucket_participants", **star) == 1
    assert env.value("throttlescope_bucket_tokens", **CLICKS_MSGS) is None
    assert env.value("throttlescope_bucket_tokens", level="broker", kind="publish", name="broker",
                     dimension="msgs") == 7
    assert env.value("throttlescope_throttled_total", **star) == 5
    assert env.value("throttlescope_throttled_total", level="subscription", kind="dispatch", name="*") == 1
    assert env.value("throttlescope_queue_length", level="topic", name="*") == 1
    env.live.goodbye("a")
    assert env.value("throttlescope_throttled_total", **star) == 5  # banked under the folded name


def test_resource_groups_quota_usage_remote_usage_and_demand(make_env) -> None:
    policies = PolicySet(version=2, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=100),
                                                    "idle": ResourceGroup(dispatchRateInBytes=500)})
    env: Env = make_env(policies=policies)

    def usage(msgs: float, demand: float, name: str = "rg") -> dict:
        return {"level": "resource_group", "name": name, "direction": "publish", "usage_msgs_per_s": msgs,
                "demand_msgs_per_s": demand, "usage_bytes_per_s": 10 * msgs}
    env.send(report(env, "a", 1, usage=[usage(70, 70), usage(5, 5, name="not-configured")]))
    env.send(report(env, "b", 1, usage=[usage(30, 70)]))
    pub = {"resource_group": "rg", "monitoring_class": "publish"}
    assert env.value("throttlescope_resource_group_configured_quota", **pub, dimension="msgs") == 100
    assert env.value("throttlescope_resource_group_configured_quota", **pub, dimension="bytes") is None
    assert env.value("throttlescope_resource_group_calculated_quota", **pub, dimension="msgs") == pytest.approx(100)
    assert env.value("throttlescope_resource_group_calculated_quota", **pub, dimension="bytes") is None
    assert env.value("throttlescope_resource_group_usage", **pub, dimension="msgs") == 100
    assert env.value("throttlescope_resource_group_usage", **pub, dimension="bytes") == 1000
    assert env.value("throttlescope_resource_group_remote_usage", **pub, dimension="msgs") == 70  # as b sees it
    assert env.value("throttlescope_resource_group_demand", **pub, dimension="msgs") == 140
    assert env.value("throttlescope_resource_group_participants", **pub) == 2
    assert env.value("throttlescope_resource_group_participants", resource_group="idle",
                     monitoring_class="dispatch") == 0
    assert env.value("throttlescope_resource_group_configured_quota", resource_group="idle",
                     monitoring_class="dispatch", dimension="bytes") == 500
    assert env.value("throttlescope_resource_group_usage", resource_group="not-configured",
                     monitoring_class="publish", dimension="msgs") is None
    # PIP-82 report suppression: a's unchanged usage is still counted
    env.send(report(env, "a", 2, usage_unchanged=[limit_key("resource_group", "publish", "rg")]))
    assert env.value("throttlescope_resource_group_usage", **pub, dimension="msgs") == 100


def test_calculated_quota_is_what_the_grant_book_grants(make_env) -> None:
    policies = PolicySet(version=2, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=100)})
    clock = ManualClock()
    book = GrantBook(1.0, None, clock=clock.now_s)
    env: Env = make_env(policies=policies, grants=book)
    key = limit_key("resource_group", "publish", "rg")
    quota = {"resource_group": "rg", "monitoring_class": "publish", "dimension": "msgs"}

    def use(pid: str, msgs: float) -> None:
        env.send(report(env, pid, 1, usage=[{"level": "resource_group", "name": "rg", "direction": "publish",
                                             "usage_msgs_per_s": msgs, "demand_msgs_per_s": msgs}]))

    use("a", 10)
    use("b", 20)
    # nobody asked for grants yet: PIP-82's fair split, which hands out the whole quota
    assert env.value("throttlescope_resource_group_calculated_quota", **quota) == pytest.approx(100)
    for pid, rate in (("a", 10), ("b", 20)):
        book.answer(pid, [GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=5,
                                   rate_msgs_per_s=rate)], policies)
    clock.advance(0.1)
    holders = book.shares({key: ["a", "b"]}, policies)[key]["holders"]
    fair = [holders[p]["msgs"]["fairPerSecond"] for p in ("a", "b")]
    # max-min fair by the wanted rates, the spare 70 in three parts (one kept for a newcomer): 76.7 handed out
    assert fair == [pytest.approx(10 + 70 / 3), pytest.approx(20 + 70 / 3)]
    assert env.value("throttlescope_resource_group_calculated_quota", **quota) == pytest.approx(math.fsum(fair))
    use("c", 5)             # reports usage, asks for no grant: PIP-82 gives it what the grant holders leave
    assert env.value("throttlescope_resource_group_calculated_quota", **quota) == pytest.approx(100)
    assert env.value("throttlescope_resource_group_calculated_quota", **{**quota, "dimension": "bytes"}) is None


def test_policy_versions_without_a_participant_label(make_env) -> None:
    env: Env = make_env(policies=PolicySet(version=5))
    assert env.value("throttlescope_participants") == 0
    assert env.value("throttlescope_applied_policy_version_min") is None
    assert env.value("throttlescope_participants_outdated") == 0
    env.send(report(env, "a", 1, applied_policy_version=3))
    env.send(report(env, "b", 1, applied_policy_version=5))
    env.send(report(env, "c", 1, applied_policy_version=5))
    assert env.value("throttlescope_policy_version") == 5
    assert env.value("throttlescope_applied_policy_version_min") == 3
    assert env.value("throttlescope_applied_policy_version_max") == 5
    assert env.value("throttlescope_participants_outdated") == 1


def test_report_latency_histogram(make_env) -> None:
    env: Env = make_env()
    env.collector.observe_report_latency(0.003)
    env.collector.observe_report_latency(0.2)
    assert env.value("throttlescope_report_latency_seconds_bucket", le="0.005") == 1
    assert env.value("throttlescope_report_latency_seconds_bucket", le="+Inf") == 2
    assert env.value("throttlescope_report_latency_seconds_count") == 2
    assert env.value("throttlescope_report_latency_seconds_sum") == pytest.approx(0.203)


ADAPTIVE = {"publishRate": {"publishThrottlingRateInMsg": 200, "adaptive": True, "adaptiveFloorInMsg": 20}}


def adaptive_ask(**outcomes: float) -> list[GrantAsk]:
    return [GrantAsk(level="topic", name="acme/api/sink", direction="publish", wants_msgs=10, rate_msgs_per_s=100,
                     outcomes=Outcomes(**outcomes))]


def test_every_family_is_the_catalogue_entry_with_bounded_labels(make_env) -> None:
    policies = PolicySet.model_validate({"version": 1, "resourceGroups": {"rg": {"publishRateInMsgs": 10}},
                                         "topics": {"acme/api/sink": ADAPTIVE}})
    book = GrantBook(1.0, None, clock=ManualClock().now_s)
    book.answer("a", adaptive_ask(ok=10), policies)
    env: Env = make_env(policies=policies, grants=book)
    env.send(report(env, "a", 1, buckets=[bucket()], counters=[counters()], dispatch_throttled={"broker": 1},
                    queues=[{"level": "topic", "name": "t/n/x", "length": 0}],
                    usage=[{"level": "resource_group", "name": "rg", "direction": "publish"}],
                    offload={"limit_bytes_per_s": 10}, applied_policy_version=1,
                    mutation_quotas=[{"user": "u", "client_id": "c", "tokens": 1}]))
    env.collector.observe_report_latency(0.01)
    families = list(env.collector.collect())
    assert [f.name for f in families] == [m.name for m in CATALOGUE]
    for family in families:
        spec = BY_NAME[family.name]
        assert (family.type, family.documentation) == (spec.type, spec.help)
        assert family.samples, f"{spec.exposed} has no sample in a full report"
        for sample in family.samples:
            assert sample.name in spec.samples
            assert set(sample.labels) - {"le"} == set(spec.labels)
            assert not {"pid", "participant", "participant_id", "task", "host"} & set(sample.labels)
        assert spec.name.startswith((PREFIX, "brk_ledgeroffloader_"))


def test_an_adaptive_limit_exports_its_learnt_rate_ceiling_pause_and_the_sinks_answers(make_env) -> None:
    policies = PolicySet.model_validate({"version": 1, "topics": {"acme/api/sink": ADAPTIVE}})
    clock = ManualClock()
    book = GrantBook(1.0, None, clock=clock.now_s)
    env: Env = make_env(policies=policies, grants=book)
    labels = {"level": "topic", "name": "acme/api/sink"}
    assert env.value("throttlescope_adaptive_rate", **labels) is None          # nobody asked yet
    book.answer("a", adaptive_ask(ok=100), policies)
    assert (env.value("throttlescope_adaptive_rate", **labels), env.value("throttlescope_adaptive_ceiling", **labels)) \
        == (200, 200)
    clock.advance(1.0)
    book.answer("a", adaptive_ask(ok=50, throttled=5, errors=1), policies)      # the sink refused: a cut
    assert env.value("throttlescope_adaptive_rate", **labels) == pytest.approx(139.5)   # 0.93 x the 150 taken
    assert env.value("throttlescope_adaptive_outcomes_total", **labels, outcome="ok") == 150
    assert env.value("throttlescope_adaptive_outcomes_total", **labels, outcome="throttled") == 5
    assert env.value("throttlescope_adaptive_outcomes_total", **labels, outcome="error") == 1
    book.answer("b", adaptive_ask(throttled=1, retry_after_s=2.0), policies)    # a Retry-After: everyone pauses
    assert env.value("throttlescope_adaptive_paused_seconds", **labels) == pytest.approx(2.0)
    assert env.value("throttlescope_adaptive_rate", **labels) == 0


def test_the_budget_of_grant_asks_shows_how_many_limits_share_it_and_what_each_gets(make_env) -> None:
    topics = {f"acme/api/t{i}": {"publishRate": {"publishThrottlingRateInMsg": 100}} for i in range(40)}
    policies = PolicySet.model_validate({"version": 1, "topics": topics})
    clock = ManualClock()
    book = GrantBook(1.0, None, clock=clock.now_s, asks_budget_per_s=1000)
    env: Env = make_env(policies=policies, grants=book)
    assert env.value("throttlescope_grant_busy_limits") == 0
    assert env.value("throttlescope_grant_asks_per_limit") == 100               # nobody asks: a limit gets its 100
    assert env.value("throttlescope_grant_asks_budget") == 1000
    asks = [GrantAsk(level="topic", name=name, direction="publish", wants_msgs=10, rate_msgs_per_s=100)
            for name in topics]
    book.answer("a", asks, policies)
    clock.advance(0.1)
    assert env.value("throttlescope_grant_busy_limits") == 40
    assert env.value("throttlescope_grant_asks_per_limit") == 25                # 40 busy limits share the 1,000
    clock.advance(1.0)
    assert env.value("throttlescope_grant_busy_limits") == 0                    # none asked in the last second


def test_grant_asks_that_arrive_later_than_their_participants_quickest_show_in_a_histogram(make_env) -> None:
    policies = PolicySet.model_validate({"version": 1, "topics": {
        "acme/api/t": {"publishRate": {"publishThrottlingRateInMsg": 100}}}})
    clock = ManualClock()
    book = GrantBook(1.0, None, clock=clock.now_s)
    env: Env = make_env(policies=policies, grants=book)
    assert env.value("throttlescope_grant_ask_delay_seconds_count") == 0           # no asks yet: an empty histogram
    assert env.value("throttlescope_grant_ask_delay_seconds_bucket", le="+Inf") == 0
    ask = [GrantAsk(level="topic", name="acme/api/t", direction="publish", wants_msgs=1, rate_msgs_per_s=10)]
    sent = 500.0   # the participant's clock against ours
    for delay_s in (0.0, 0.0005, 0.03, 0.002):      # its quickest ask, then three that came that much later
        clock.advance(0.1)
        book.answer("a", ask, policies, sent_s=clock.now_s() + sent - delay_s)
    book.answer("b", ask, policies)                  # an ask that does not say when it was sent: not counted
    assert env.value("throttlescope_grant_ask_delay_seconds_count") == 4
    assert env.value("throttlescope_grant_ask_delay_seconds_sum") == pytest.approx(0.0325)
    assert env.value("throttlescope_grant_ask_delay_seconds_bucket", le="0.001") == 2
    assert env.value("throttlescope_grant_ask_delay_seconds_bucket", le="0.0025") == 3
    assert env.value("throttlescope_grant_ask_delay_seconds_bucket", le="0.025") == 3
    assert env.value("throttlescope_grant_ask_delay_seconds_bucket", le="0.05") == 4
    assert env.value("throttlescope_grant_ask_delay_seconds_bucket", le="+Inf") == 4
