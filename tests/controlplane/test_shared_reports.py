"""Replicas' live state through a real Redis stream: a report or goodbye one replica takes is in every other's."""

from __future__ import annotations

import time

import pytest

from controlplane.shared_reports import ReportFollower, ReportStream
from controlplane.state import LiveState
from protocol import Report, limit_key

from .conftest import report, usage

pytestmark = pytest.mark.integration


def replica(url: str, name: str) -> tuple[LiveState, ReportStream, ReportFollower]:
    live = LiveState(1.0)
    stream = ReportStream(url, prefix=f"test:{time.monotonic_ns()}:" if name == "solo" else "test:shared:",
                          replica_id=name)
    return live, stream, ReportFollower(stream, live, block_ms=50)


def take(live: LiveState, stream: ReportStream, body: dict) -> Report:
    """What the report route does on a replica: ingest, then pass on what was accepted."""
    r = Report.model_validate(body)
    accepted, _ = live.ingest(r)
    if accepted:
        stream.put(r)
    return r


def test_a_report_taken_by_one_replica_is_in_the_others_live_state(redis_url: str) -> None:
    (live_a, stream_a, follow_a), (live_b, stream_b, follow_b) = replica(redis_url, "a"), replica(redis_url, "b")
    body = report("p1", seq=1, usage=[usage("rg", 120.0, demand=300.0)])
    take(live_a, stream_a, body)
    assert follow_b.follow_once() >= 1 and follow_b.ingested == 1
    key = limit_key("resource_group", "publish", "rg")
    assert live_b.usage_map([key]) == live_a.usage_map([key])
    assert live_b.usage_map([key])[key]["p1"].demand_msgs_per_s == 300.0
    # the participant moves to b: b takes its next report, a follows it
    take(live_b, stream_b, report("p1", seq=2, usage=[usage("rg", 200.0)]))
    follow_a.follow_once()
    assert live_a.last_seq("p1") == 2 and follow_a.ingested == 1
    assert live_a.usage_map([key])[key]["p1"].usage_msgs_per_s == 200.0
    # its own entries and old news are skipped unparsed
    follow_b.follow_once()
    assert follow_b.ingested == 1
    # a goodbye said to one replica removes it from every one
    stream_a.bye("p1")
    live_a.goodbye("p1")
    follow_b.follow_once()
    assert live_b.last_seq("p1") == -1
    assert [d.why for d in live_b.snapshot().departed] == ["goodbye"]


def test_an_entry_that_is_not_a_report_is_skipped_and_the_rest_still_read(redis_url: str) -> None:
    live, stream, follower = replica(redis_url, "solo")
    other = ReportStream(redis_url, prefix=stream.key.removesuffix("reports"), replica_id="other")
    other._redis.xadd(stream.key, {"r": "other", "pid": "px", "seq": "1", "body": "{not json"})
    other.put(Report.model_validate(report("p2", seq=1)))
    assert follower.follow_once() == 2
    assert live.last_seq("p2") == 1 and live.last_seq("px") == -1


def test_a_redis_that_is_down_costs_the_views_not_the_report() -> None:
    from controlplane.launcher import free_port
    stream = ReportStream(f"redis://127.0.0.1:{free_port()}", replica_id="a")
    stream.put(Report.model_validate(report("p1")))   # no exception: the participant still gets its answer
    assert stream._breaker.down
