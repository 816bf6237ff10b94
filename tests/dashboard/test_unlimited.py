"""An unlimited value reads "unlimited" everywhere in the dashboard -- never None, -1 or 0 -- in the rows every
table is made of, in the audit log and the confirmation of a change, and on the charts."""

from __future__ import annotations

import math

import pytest

from dashboard import derive, derive_participants, figures
from protocol.state import HistoryPoint

from .answers import buckets, participant, participants, resource_group, resource_groups

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value", [None, -1, -1.0, 0, math.inf, math.nan, "unlimited"])
def test_no_limit_reads_unlimited(value: object) -> None:
    assert derive.limit_value(value) == derive.limit_text(value, "msgs/s") == "unlimited"


def test_a_limit_reads_as_its_number_and_a_zero_share_stays_zero() -> None:
    assert derive.limit_value(40) == 40 and derive.limit_text(40, "msgs/s") == "40 msgs/s"
    assert derive.limit_text(300000, "B/s") == "300,000 B/s" and derive.limit_text(12.25) == "12.25"
    assert derive.limit_value(0, zero_is_unlimited=False) == 0
    assert derive.limit_value(-1, zero_is_unlimited=False) == "unlimited"


def test_tables_show_unlimited_limits_quotas_and_permits() -> None:
    doc = buckets(totals=[{"level": "topic", "kind": "publish", "name": "a/b/c", "participants": 2,
                           "msgs": {"tokens": -3.0, "rate": 80.0, "capacity": 80.0},
                           "bytes": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0}},
                          {"level": "broker", "kind": "publish", "name": "broker", "participants": 1,
                           "msgs": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0},     # no bucket: summed as 0
                           "bytes": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0}}])
    rows = derive.bucket_rows(doc)
    assert [(r["msgs limit"], r["bytes limit"]) for r in rows] == [(80.0, "unlimited"), ("unlimited", "unlimited")]
    assert [(r["msgs tokens"], r["in debt"]) for r in rows] == [(-3.0, True), (0.0, False)]
    use = {"usage_msgs_per_s": 5.0, "demand_msgs_per_s": 9.0, "usage_bytes_per_s": 50.0, "demand_bytes_per_s": 0.0}
    publish = {"quotaMsgsPerSecond": -1, "quotaBytesPerSecond": -1, "participants": {
        "p1": {**use, "allocation_msgs_per_s": -1, "allocation_bytes_per_s": -1},
        "p2": {**use, "allocation_msgs_per_s": 0.0, "allocation_bytes_per_s": 10.0}}}
    rgs = resource_groups([resource_group("rg", publish=publish)])
    rows = derive.rg_rows(rgs)
    assert [(r["quota msgs/s"], r["quota bytes/s"], r["group quota msgs/s"]) for r in rows] == [
        ("unlimited", "unlimited", "unlimited"), (0.0, 10, "unlimited")]      # p2's share is a real 0
    offload = {"read_bytes_total": 1, "limited_total": 0, "offload_time_seconds_total": 0.0, "reading_max_bytes": 1,
               "errors_total": 0}
    people = participants([participant("p1", offload={**offload, "limit_bytes_per_s": -1}),
                           participant("p2", offload={**offload, "limit_bytes_per_s": 500})])
    assert [r["permits bytes/s"] for r in derive_participants.offload_rows(people)] == ["unlimited", 500]


def test_the_permits_line_counts_the_participants_that_offloaded() -> None:
    rows = [{"read bytes": n} for n in (16_000_000, 0, 20_000_000, 0, 0)]
    assert derive_participants.permits_line(1_000_000, rows) == 2_000_000      # two of five read
    assert derive_participants.permits_line(1_000_000, rows[1:2]) is None       # nobody has read yet
    assert derive_participants.permits_line(-1, rows) is None                   # unlimited
    assert derive_participants.permits_line(None, rows) is None                 # not set


def test_the_audit_log_and_the_confirmation_say_unlimited_for_a_limit_field() -> None:
    old = {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 0, "ratePeriodInSecond": 1}
    new = {"publishThrottlingRateInMsg": 40, "publishThrottlingRateInByte": 0, "ratePeriodInSecond": 1}
    assert [(r["field"], r["old"], r["new"]) for r in derive.diff_rows(old, new)] == [
        ("publishThrottlingRateInMsg", "unlimited", "40"), ("publishThrottlingRateInByte", "unlimited", "unlimited"),
        ("ratePeriodInSecond", "1", "1")]
    assert derive.change_text(old, new) == "publishThrottlingRateInMsg: unlimited → 40"
    assert derive.change_text({"quotaPerSecond": 5}, {"quotaPerSecond": -1}) == "quotaPerSecond: 5 → unlimited"
    assert derive.change_text(None, {"managedLedgerOffloadBrokerFlowPermitsPerSecond": -1}) == \
        "set managedLedgerOffloadBrokerFlowPermitsPerSecond: unlimited"
    assert derive.change_text(None, {"publishRateInMsgs": -1, "dispatchRateInMsgs": 7.5}) == \
        "set publishRateInMsgs: unlimited, dispatchRateInMsgs: 7.5"
    assert derive.change_text({"samples": 0}, {"samples": -1}) == "samples: 0 → -1"   # not a limit: as it is


def test_a_rate_chart_without_a_limit_says_unlimited() -> None:
    pts = [HistoryPoint(t=1_800_000_000.0 + i, admittedMsgsPerSecond=5.0) for i in range(3)]
    fig = figures.rate_vs_limit_figure(pts, None)
    assert [t.name for t in fig.data] == ["admitted msgs/s"]
    assert [a.text for a in fig.layout.annotations] == ["limit: unlimited"]
    assert not figures.rate_vs_limit_figure(pts, 40.0).layout.annotations


def test_a_table_column_of_limits_and_unlimited_is_text_throughout() -> None:
    import pandas as pd

    from dashboard import ui
    frame = ui._texts_where_mixed(pd.DataFrame([{"limit": 80.0, "n": 1.5, "all": "unlimited"},
                                                {"limit": "unlimited", "n": 2.0, "all": "unlimited"},
                                                {"limit": 1234.5, "n": 3.0, "all": "unlimited"}]))
    assert list(frame["limit"]) == ["80", "unlimited", "1,234.5"]    # (Arrow takes one type per column)
    assert list(frame["n"]) == [1.5, 2.0, 3.0] and list(frame["all"]) == ["unlimited"] * 3
