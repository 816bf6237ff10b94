"""The pure transforms behind the pages, and the dashboard's configuration, on plain data: the control plane's
answers as JSON literals, read through the models the dashboard reads them with (``answers``)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from dashboard import derive, derive_participants
from dashboard.config import DEFAULT_URL, load_config
from dashboard.derive_participants import OffloadSample
from protocol.state import HistoryPoint

from .answers import (
    bucket,
    buckets,
    departed,
    history,
    participant,
    participants,
    resource_group,
    resource_groups,
    shared,
    state,
)

pytestmark = pytest.mark.unit


def series(level: str, name: str, kind: str = "publish", **fields: list[float | None]) -> dict:
    n = len(next(iter(fields.values())))
    return {"level": level, "kind": kind, "name": name,
            "points": [{"t": 100.0 + i, **{k: v[i] for k, v in fields.items()}} for i in range(n)]}


def test_freshness_says_how_old_the_newest_report_is_and_when_it_is_stale() -> None:
    doc = participants([participant("p1", lastSeen=98.0), participant("p2", lastSeen=99.2)])
    assert derive_participants.freshness(doc, 101.0) == (pytest.approx(1.8), False, "updated 2 s ago")
    doc = participants(gone=[departed(lastSeen=0.0)])
    age, stale, text = derive_participants.freshness(doc, 600.0)
    assert stale and text == "updated 10 min ago"
    assert derive_participants.freshness(participants(), 1.0) == (None, False, "no report yet")
    assert derive_participants.freshness(participants([participant(lastSeen=96.0)], interval_s=2.0), 101.0)[1] \
        is False     # 5 s is stale at 1-s reports, not at 2-s ones


def test_jain_index() -> None:
    assert derive.jain([10, 10, 10]) == pytest.approx(1.0)
    assert derive.jain([30, 0, 0]) == pytest.approx(1 / 3)
    assert derive.jain([3, 1]) == pytest.approx(16 / 20)
    assert derive.jain([]) is None and derive.jain([0, 0]) is None


def test_top_throttled_ranks_by_throttle_time_and_counts_throttles() -> None:
    doc = history([
        series("topic", "a/b/c", throttleSecondsPerSecond=[1.0, 3.0], throttledPerSecond=[4.0, 2.0],
               admittedMsgsPerSecond=[40.0, 39.0]),
        series("tenant", "a", throttleSecondsPerSecond=[4.0, 4.0], throttledPerSecond=[2.0, 2.0],
               admittedMsgsPerSecond=[20.0, None]),
        series("namespace", "a/b", throttleSecondsPerSecond=[0.0, 0.0], throttledPerSecond=[0.0, None],
               admittedMsgsPerSecond=[1.0, 1.0])], interval_s=0.5)
    rows = derive.top_throttled(doc)
    assert [(r["target"], r["throttle s/s"], r["throttled"], r["admitted msgs/s"]) for r in rows] == [
        ("tenant a", 4.0, 2, 20.0), ("topic a/b/c", 2.0, 3, 39.0)]


def test_limits_are_rates_per_second_summed_over_participants() -> None:
    doc = buckets([
        bucket("topic", "a/b/c", msgs={"tokens": 5, "rate": 20, "capacity": 20, "period_s": 1.0}, bytes=None),
        bucket("topic", "a/b/c", msgs={"tokens": 0, "rate": 60, "capacity": 60, "period_s": 2.0}, bytes=None),
        bucket("broker", "broker", msgs=None, bytes=None)])
    assert derive.limits_per_s(doc) == {("topic", "publish", "a/b/c"): {"msgs": 50.0, "bytes": None},
                                        ("broker", "publish", "broker"): {"msgs": None, "bytes": None}}
    rates = history([series("topic", "a/b/c", admittedMsgsPerSecond=[45.0, 55.0]),
                     series("broker", "broker", admittedMsgsPerSecond=[99.0, 99.0])])
    assert derive.admitted_vs_limit(rates, doc) == [
        {"target": "topic a/b/c", "admitted msgs/s": 50.0, "limit msgs/s": 50.0, "use %": 100.0}]


def test_the_totals_alone_give_the_limits_the_rows_give() -> None:
    # what the pages read (data.bucket_totals): the totals' sums of the limited rates per second, no row each
    totals = [{"level": "topic", "kind": "publish", "name": "a/b/c", "participants": 2,
               "msgs": {"tokens": 5.0, "rate": 80.0, "capacity": 80.0, "ratePerSecond": 50.0}},
              {"level": "broker", "kind": "publish", "name": "broker", "participants": 1}]
    assert derive.limits_per_s(buckets(totals=totals)) == {
        ("topic", "publish", "a/b/c"): {"msgs": 50.0, "bytes": None},
        ("broker", "publish", "broker"): {"msgs": None, "bytes": None}}


def test_a_shared_limit_is_shown_as_configured_not_as_its_buckets_pace() -> None:
    """Under grants each participant's bucket runs at what its grants hand it: two that want less than their
    shares of a topic limit of 50 sum to 32.3. The tables and the admitted-vs-limit chart show the 50."""
    per_second = {"tokens": 1, "capacity": 16.2, "period_s": 1.0}
    doc = buckets([bucket("topic", "a/b/c", msgs={**per_second, "rate": 16.2}, bytes=None),
                   bucket("topic", "a/b/c", msgs={**per_second, "rate": 16.1}, bytes=None),
                   bucket("broker", "broker", msgs={**per_second, "rate": 500.0}, bytes=None)],
                  totals=[{"level": "topic", "kind": "publish", "name": "a/b/c", "participants": 2,
                           "msgs": {"tokens": 2.0, "rate": 32.3, "capacity": 32.4},
                           "bytes": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0}}])
    configured = shared([{"key": "topic:publish:a/b/c", "level": "topic", "direction": "publish", "name": "a/b/c",
                          "limitMsgsPerSecond": 50.0, "limitBytesPerSecond": "unlimited", "windowSeconds": 1.0,
                          "askers": 2, "usageMsgsPerSecond": 24.0, "demandMsgsPerSecond": 24.0,
                          "usageBytesPerSecond": 0.0, "demandBytesPerSecond": 0.0, "grantedMsgsInWindow": 24.0,
                          "grantedBytesInWindow": "unlimited", "utilisation": 0.48, "utilisationBytes": None,
                          "participants": []}])
    assert derive.limits_per_s(doc)[("topic", "publish", "a/b/c")]["msgs"] == pytest.approx(32.3)   # the pace
    assert derive.limits_per_s(doc, configured) == {("topic", "publish", "a/b/c"): {"msgs": 50.0, "bytes": None},
                                                    ("broker", "publish", "broker"): {"msgs": 500.0, "bytes": None}}
    [row] = derive.bucket_rows(doc, configured)
    assert (row["msgs limit"], row["bytes limit"]) == (50.0, "unlimited")
    assert derive.bucket_rows(doc)[0]["msgs limit"] == pytest.approx(32.3)
    rates = history([series("topic", "a/b/c", admittedMsgsPerSecond=[24.0, 24.0])])
    assert derive.admitted_vs_limit(rates, doc, shared=configured) == [
        {"target": "topic a/b/c", "admitted msgs/s": 24.0, "limit msgs/s": 50.0, "use %": 48.0}]


def test_a_participant_is_named_by_its_executor_or_with_its_pid_where_executors_repeat() -> None:
    cluster = ["app/1/host-a/401/x", "app/2/host-b/402/y"]
    assert derive.short_names(cluster) == {"app/1/host-a/401/x": "1", "app/2/host-b/402/y": "2"}
    local = ["demo/driver/vm/3233/a", "demo/driver/vm/3237/b"]      # a local master: one executor id for all
    assert derive.short_names(local) == {"demo/driver/vm/3233/a": "driver/3233", "demo/driver/vm/3237/b": "driver/3237"}
    same = ["demo/driver/vm/3233/a", "demo/driver/vm/3233/b"]        # a pid reused: the whole id
    assert derive.short_names(same) == {pid: pid for pid in same}
    assert derive.short_names(["odd"]) == {"odd": "odd"}


def test_shares_of_topics_under_a_shared_limit() -> None:
    doc = history([series("topic", "acme/web/clicks", admittedMsgsPerSecond=[40.0, 40.0]),
                   series("topic", "acme/web/views", admittedMsgsPerSecond=[10.0, 10.0]),
                   series("topic", "acme/batch/export", admittedMsgsPerSecond=[30.0, 30.0]),
                   series("topic", "beta/etl/load", admittedMsgsPerSecond=[5.0, 5.0]),
                   series("topic", "beta/etl/load", "dispatch", admittedMsgsPerSecond=[50.0, 50.0])])
    rgs = resource_groups([resource_group("rg", namespaces=["acme/batch"], tenants=["beta"])])
    assert derive.parents(doc, rgs) == [("namespace", "acme/web"), ("resource_group", "rg"), ("tenant", "acme")]
    assert derive.child_shares(doc, ("tenant", "acme")) == {
        "acme/web/clicks": 40.0, "acme/web/views": 10.0, "acme/batch/export": 30.0}
    assert derive.child_shares(doc, ("resource_group", "rg"), rgs) == {"acme/batch/export": 30.0,
                                                                       "beta/etl/load": 5.0}   # publish only


def test_queue_rows_keep_queue_order() -> None:
    queues = state("/v1/state/queues", {"queues": [
        {"participantId": "p1", "level": "resource_group", "name": "rg", "length": 3,
         "entries": [{"producer": "x", "waiting_s": 0.9}, {"producer": "y", "waiting_s": 0.1}]}]})
    rows = derive.queue_rows(queues)
    assert [(r["queue"], r["participant"], r["position"], r["producer"], r["waiting s"], r["queue length"])
            for r in rows] == [("resource group rg", "p1", 1, "x", 0.9, 3), ("resource group rg", "p1", 2, "y", 0.1, 3)]


def test_offload_samples_become_rates() -> None:
    doc = participants([participant("p1", lastSeen=10.0, offload={"rate_bytes_per_s": 0, "read_bytes_total": 1000,
                                                                   "limited_total": 2}),
                        participant("p2", lastSeen=12.0, offload={"rate_bytes_per_s": 0, "read_bytes_total": 500,
                                                                   "limited_total": 1}),
                        participant("p3", lastSeen=99.0, offload=None)])
    a = derive_participants.offload_sample(doc, 100.0)
    assert a == OffloadSample(t=100.0, seen=12.0, rate=0.0, read=1500.0, limited=3.0)
    b = replace(a, t=102.0, read=5500.0, limited=7.0)
    c = replace(b, t=103.0, read=100.0, limited=1.0, rate=700.0)      # a participant restarted
    assert derive_participants.offload_points([a, b, c]) == [
        HistoryPoint(t=102.0, admittedBytesPerSecond=2000.0, throttledPerSecond=2.0),
        HistoryPoint(t=103.0, admittedBytesPerSecond=700.0, throttledPerSecond=1.0)]
    assert derive_participants.offload_sample(participants([participant(lastSeen=1.0, offload=None)]), 1.0) is None


@pytest.mark.parametrize(("value", "ok"), [(0, True), (-1, True), (-1.0, True), (12.5, True), (-0.5, False),
                                           (-2, False), (math.inf, False), (math.nan, False), (True, False)])
def test_check_limit_allows_what_the_control_plane_allows(value: float, ok: bool) -> None:
    problem = derive.check_limit(value)
    assert (problem is None) == ok
    if not ok:
        assert derive.LIMIT_RULE in problem


def test_diff_applied_and_audit_rows() -> None:
    rows = derive.diff_rows({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": True})
    assert rows == [{"field": "a", "old": "1", "new": "1", "changed": ""},
                    {"field": "b", "old": "2", "new": "3", "changed": "yes"},
                    {"field": "c", "old": "(not set)", "new": "true", "changed": "yes"}]
    assert derive.diff_rows(None, None) == []
    doc = participants([participant("p1", appliedPolicyVersion=7, secondsSinceLastSeen=0.4),
                        participant("p2", appliedPolicyVersion=6, secondsSinceLastSeen=120.0)],
                       gone=[departed(appliedPolicyVersion=7)])
    done, total, applied = derive_participants.applied(doc, 7)
    assert (done, total) == (1, 2)      # the live ones only
    assert [(r["participant"], r["applied"], r["last report"]) for r in applied] == [
        ("p1", "yes", "0 s ago"), ("p2", "not yet", "2 min ago")]
    audit = derive.audit_rows({"entries": [{"policyVersion": 3, "time": 1.0, "actor": "admin", "method": "PUT",
                                            "endpoint": "/x", "oldValue": None, "newValue": {"q": 1}}]})
    assert audit == [{"version": 3, "time": 1.0, "actor": "admin", "method": "PUT", "endpoint": "/x",
                      "change": "set q: 1", "old": "(not set)", "new": '{"q": 1}'}]
    assert derive.change_text({"m": 40, "b": -1}, {"m": 25, "b": -1}) == "m: 40 → 25"
    assert derive.change_text({"m": 40}, None) == "removed (was m: 40)"
    assert derive.change_text(False, True) == "false → true"


def test_config_from_the_environment_then_the_data_dir(tmp_path: Path) -> None:
    assert load_config({}).url == DEFAULT_URL and load_config({}).admin_token_source in ("none", "file")
    assert load_config({}).prometheus_url is None and load_config({"PROMETHEUS_URL": " "}).prometheus_url is None
    (tmp_path / "admin.token").write_text("from-file-0123456789\n")
    cfg = load_config({"THROTTLESCOPE_DATA_DIR": str(tmp_path), "THROTTLESCOPE_URL": "http://cp:9000/",
                       "PROMETHEUS_URL": "http://prom:9090/", "THROTTLESCOPE_DASHBOARD_REFRESH": "5"})
    assert (cfg.url, cfg.admin_token, cfg.admin_token_source) == ("http://cp:9000", "from-file-0123456789", "file")
    assert (cfg.auth, cfg.proxy_token, cfg.oidc_claim) == ("auto", None, "email")
    assert (cfg.prometheus_url, cfg.refresh_s) == ("http://prom:9090", 5.0)
    cfg = load_config({"THROTTLESCOPE_DATA_DIR": str(tmp_path), "THROTTLESCOPE_ADMIN_TOKEN": "env-0123456789abcdef",
                       "THROTTLESCOPE_DASHBOARD_REFRESH": "nonsense"})
    assert (cfg.admin_token, cfg.admin_token_source, cfg.refresh_s) == ("env-0123456789abcdef", "env", 2.0)
    (tmp_path / "admin.token").unlink()
    cfg = load_config({"THROTTLESCOPE_DATA_DIR": str(tmp_path), "THROTTLESCOPE_DASHBOARD_AUTH": " OIDC ",
                       "THROTTLESCOPE_DASHBOARD_TOKEN": "proxy-0123456789", "THROTTLESCOPE_DASHBOARD_OIDC_CLAIM": "sub"})
    assert (cfg.admin_token, cfg.admin_token_source) == (None, "none")
    assert (cfg.auth, cfg.proxy_token, cfg.oidc_claim) == ("oidc", "proxy-0123456789", "sub")
    assert "token" not in repr(cfg).replace("admin_token_source", "") and "proxy-0123" not in repr(cfg)



def test_a_topic_s_own_resource_group_wins_over_its_namespace_s_as_on_the_participants() -> None:
    doc = history([series("topic", "acme/web/clicks", admittedMsgsPerSecond=[40.0, 40.0]),
                   series("topic", "acme/web/views", admittedMsgsPerSecond=[10.0, 10.0])])
    rgs = resource_groups([resource_group("web", namespaces=["acme/web"]),
                           resource_group("vip", topics=["acme/web/clicks"])])
    assert derive.child_shares(doc, ("resource_group", "web"), rgs) == {"acme/web/views": 10.0}
    assert derive.child_shares(doc, ("resource_group", "vip"), rgs) == {"acme/web/clicks": 40.0}


def test_nothing_to_show_until_a_participant_reported_or_history_has_a_series() -> None:
    assert derive_participants.is_empty(participants(), history([]))
    assert derive_participants.is_empty(participants())
    assert not derive_participants.is_empty(participants(gone=[departed()]), history([]))
    assert not derive_participants.is_empty(participants(), history([series("topic", "a/b/c", tokensMsgs=[1.0])]))


def test_mutation_quotas_one_row_per_participant_and_client() -> None:
    quota = {"user": "alice", "client_id": "etl", "tokens": -6.004, "rate": 2.0, "throttle_time_s": 3.0}
    doc = participants([participant("p1", mutationQuotas=[quota, {**quota, "client_id": "ui", "tokens": 4.0}]),
                        participant("p2")])
    assert derive_participants.mutation_rows(doc) == [
        {"user": "alice", "client id": "etl", "participant": "p1", "tokens": -6.0, "rate /s": 2.0, "throttle s": 3.0},
        {"user": "alice", "client id": "ui", "participant": "p1", "tokens": 4.0, "rate /s": 2.0, "throttle s": 3.0}]
