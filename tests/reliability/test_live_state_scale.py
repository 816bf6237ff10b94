"""The control plane's live state at scale, on a fake clock (what the load and churn figures rest on).

- The usage map is an index kept in step with every report, goodbye and expiry: a participant that left is in
  no answer, and nothing of it stays behind however many come and go.
- Expiry goes by when a participant was last heard from, not when it first came.
- The history keeps per-participant values only for the last two slots (a late report still counts in the
  slot it skipped); an older slot keeps just its sums, which are what ``history()`` shows (memory per slot no
  longer grows with the number of participants).
"""

from __future__ import annotations

from typing import Any

import pytest

from controlplane import views
from controlplane.state import LiveState
from protocol import Report, limit_key
from tests.controlplane.conftest import usage
from tests.controlplane.fake_clock import FakeClock, report_at

pytestmark = pytest.mark.unit
KEY = limit_key("resource_group", "publish", "rg")


def make(clock: FakeClock, pid: str, seq: int, **kw: Any) -> Report:
    return report_at(clock, pid=pid, seq=seq, usage=[usage("rg", 10)], **kw)


def test_usage_index_follows_reports_goodbyes_and_expiry_and_keeps_nothing_behind() -> None:
    clock = FakeClock()
    live = LiveState(1.0, clock)
    for i in range(1000):
        assert live.ingest(make(clock, f"p{i}", 1))[0]
    assert len(live.usage_map([KEY])[KEY]) == 1000
    for i in range(0, 1000, 2):
        assert live.goodbye(f"p{i}")
    users = live.usage_map([KEY])[KEY]
    assert len(users) == 500 and not any(f"p{i}" in users for i in range(0, 1000, 2))
    # p1 moves to another group: it leaves the first one's map at once
    assert live.ingest(report_at(clock, pid="p1", seq=2, usage=[usage("other", 1)]))[0]
    assert "p1" not in live.usage_map([KEY])[KEY]
    clock.t += 1.5
    for i in range(3, 1000, 2):               # all but p1 report again: p1 is now the least recently heard from
        assert live.ingest(make(clock, f"p{i}", 2))[0]
    clock.t += 1.0                            # p1 silent for 2.5 s > 2 intervals: expired; the others are not
    assert live.ingest(make(clock, "p3", 3))[0]
    assert len(live.usage_map([KEY])[KEY]) == 499
    assert live.usage_map([limit_key("resource_group", "publish", "other")]) == {
        limit_key("resource_group", "publish", "other"): {}}
    clock.t += 5.0                            # everyone silent: all expired on the next access
    assert views.participants(live, 1).participants == []
    assert live.usage_map([KEY]) == {KEY: {}}
    assert live._usage.everything() == {} and live._peers == {}, "something of the departed stayed in the index"


def test_expiry_goes_by_last_heard_not_first_seen() -> None:
    clock = FakeClock()
    live = LiveState(1.0, clock)
    assert live.ingest(make(clock, "first", 1))[0]
    clock.t += 1.0
    assert live.ingest(make(clock, "second", 1))[0]
    clock.t += 0.5
    assert live.ingest(make(clock, "first", 2))[0]      # first is heard from again, after second
    clock.t += 1.8                                      # second silent 2.3 s: expired; first 1.8 s: live
    ids = [p.participantId for p in views.participants(live, 1).participants]
    assert ids == ["first"]
    assert [d.participantId for d in views.participants(live, 1).departed] == ["second"]


def test_past_history_slots_keep_sums_only_and_show_the_same() -> None:
    clock = FakeClock(2_000_000.0)
    live = LiveState(1.0, clock)
    counters = [{"level": "topic", "name": "t/n/x", "kind": "publish", "admitted_msgs_total": 0}]
    for slot in range(4):
        for i in range(100):
            counters[0]["admitted_msgs_total"] = 10 * (slot + 1) * (i + 1)
            assert live.ingest(make(clock, f"p{i}", slot + 1, counters=counters))[0]
        clock.t += 1.0
    live.settle()   # (the history's part of a report comes after its answer)
    series = live._history.series["topic", "publish", "t/n/x"]
    assert len(series) == 4
    # the last two slots stay open (a late report's rate is counted in the slot it skipped), older ones are sums
    assert all(s.values == {} and s.sums is not None for s in list(series)[:-2]), "past slots hold per-participant values"
    assert all(len(s.values) == 100 and s.sums is None for s in list(series)[-2:])
    points = live.history()["series"][0]["points"]
    assert [p["participants"] for p in points] == [100] * 4
    # each participant admitted 10 * (i + 1) more per 1 s slot: the slot's rate is the sum over participants
    assert [p["admittedMsgsPerSecond"] for p in points[1:]] == [pytest.approx(10 * 5050)] * 3
    assert points[0]["admittedMsgsPerSecond"] is None       # no earlier report: no rate yet


def test_slots_past_reach_are_closed_an_eighth_a_report_not_all_in_the_first_report_of_a_new_slot() -> None:
    clock = FakeClock(3_000_000.0)
    live = LiveState(1.0, clock)
    limiters = 64
    counters = [{"level": "topic", "name": f"t/n/x{k}", "kind": "publish", "admitted_msgs_total": 0}
                for k in range(limiters)]
    history = live._history

    def open_past_reach() -> int:   # slots older than the last two that still hold per-participant values
        return sum(s.sums is None for series in history.series.values() for s in list(series)[:-2])

    for slot in range(3):
        for i in range(10):
            for c in counters:
                c["admitted_msgs_total"] = 10 * (slot + 1)
            assert live.ingest(make(clock, f"p{i}", slot + 1, counters=counters))[0]
            live.settle()   # (the history's part of a report comes after its answer)
            if slot == 2:
                # the slot's first report queued the 64 slots of the first second and closed 8 of them; each
                # later one closes an eighth of what waits (at least one)
                waiting = [56, 49, 42, 36, 31, 27, 23, 20, 17, 14]
                assert open_past_reach() == waiting[i]
        clock.t += 1.0
    points = live.history()["series"][0]["points"]
    assert [p["participants"] for p in points] == [10, 10, 10]
    assert [p["admittedMsgsPerSecond"] for p in points[1:]] == [pytest.approx(10 * 10)] * 2
    for seq in range(4, 30):   # the queue drains as reports come (the next slot queued 64 more)
        clock.t += 0.01
        assert live.ingest(make(clock, "p0", seq, counters=counters))[0]
    live.settle()
    assert open_past_reach() == 0
