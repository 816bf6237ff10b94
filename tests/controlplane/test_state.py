"""Live state on a fake clock: staleness, sequence, expiry, usage map, history rates, allocations."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from controlplane import views
from controlplane.state import LiveState
from protocol import PolicySet, Report, ResourceGroup, limit_key

from .conftest import report, usage
from .fake_clock import FakeClock, report_at

pytestmark = pytest.mark.unit


def test_stale_and_out_of_sequence_reports_are_ignored() -> None:
    clock = FakeClock()
    live = LiveState(1.0, clock)
    assert live.ingest(report_at(clock, seq=5)) == (True, None)
    accepted, why = live.ingest(report_at(clock, seq=5))
    assert not accepted and "not above" in (why or "")
    old = Report.model_validate(report(seq=6, sent_at=clock.t - 2.5))
    accepted, why = live.ingest(old)
    assert not accepted and "2 report intervals" in (why or "")
    assert views.participants(live, 1).participants[0].seq == 5


def test_expiry_after_two_intervals_and_goodbye() -> None:
    clock = FakeClock()
    live = LiveState(0.5, clock)
    live.ingest(report_at(clock, pid="a"))
    live.ingest(report_at(clock, pid="b"))
    clock.t += 0.9
    live.ingest(report_at(clock, pid="b", seq=2))
    assert [p.participantId for p in views.participants(live, 1).participants] == ["a", "b"]
    clock.t += 0.2   # a: 1.1 s > 2 x 0.5 s
    view = views.participants(live, 1)
    assert [p.participantId for p in view.participants] == ["b"]
    assert view.departed[0].participantId == "a" and view.departed[0].departedBecause == "expired"
    assert live.goodbye("b") and not live.goodbye("b")
    assert views.participants(live, 1).participants == []


def test_usage_map_covers_the_reported_keys_across_participants() -> None:
    clock = FakeClock()
    live = LiveState(1.0, clock)
    live.ingest(report_at(clock, pid="a", usage=[usage("rg", 10, 30), usage("other", 1)]))
    live.ingest(report_at(clock, pid="b", usage=[usage("rg", 20)]))
    key = limit_key("resource_group", "publish", "rg")
    m = live.usage_map([key])
    assert set(m) == {key} and set(m[key]) == {"a", "b"}
    assert m[key]["a"].demand_msgs_per_s == 30 and m[key]["b"].usage_msgs_per_s == 20
    live.ingest(report_at(clock, pid="a", seq=2, usage=[usage("other", 1)]))  # a stopped using rg
    assert set(live.usage_map([key])[key]) == {"b"}


def test_history_rates_from_counter_deltas_summed_over_participants() -> None:
    clock = FakeClock(1000.0)
    live = LiveState(1.0, clock)

    def counters(msgs: float, throttle: float) -> list[dict[str, Any]]:
        return [{"level": "topic", "name": "t/n/x", "kind": "publish", "admitted_msgs_total": msgs,
                 "throttle_time_seconds_total": throttle, "throttled_count": 0}]

    for pid in ("a", "b"):
        live.ingest(report_at(clock, pid=pid, counters=counters(100, 0)))
    clock.t += 1.0
    live.ingest(report_at(clock, pid="a", seq=2, counters=counters(150, 0.5)))
    live.ingest(report_at(clock, pid="b", seq=2, counters=counters(130, 0.0)))
    series = live.history(level="topic")["series"]
    assert len(series) == 1 and series[0]["name"] == "t/n/x"
    last = series[0]["points"][-1]
    assert last["admittedMsgsPerSecond"] == pytest.approx(80.0)
    assert last["throttleSecondsPerSecond"] == pytest.approx(0.5) and last["participants"] == 2
    assert series[0]["points"][0]["admittedMsgsPerSecond"] is None   # no previous report: no rate yet
    assert live.history(level="broker")["series"] == []


def test_a_late_report_counts_its_rate_in_every_slot_it_spans() -> None:
    clock = FakeClock(1000.0)
    live = LiveState(1.0, clock)

    def send(pid: str, seq: int, msgs: float, tokens: float = 0.0) -> None:
        counters = [{"level": "topic", "name": "t/n/x", "kind": "publish", "admitted_msgs_total": msgs}]
        buckets = [{"level": "topic", "name": "t/n/x", "kind": "publish",
                    "msgs": {"tokens": tokens, "rate": 100, "capacity": 100, "period_s": 1}}]
        assert live.ingest(report_at(clock, pid=pid, seq=seq, counters=counters, buckets=buckets))[0]

    def points() -> dict[float, dict[str, Any]]:
        return {p["t"]: p for p in live.history(level="topic")["series"][0]["points"]}

    clock.t = 1000.1
    send("a", 1, 0)
    send("b", 1, 0, tokens=5)
    clock.t = 1001.1
    send("a", 2, 100)
    send("b", 2, 50, tokens=4)
    clock.t = 1002.1
    send("a", 3, 200)                   # b's report for slot 1002 comes late, in slot 1003
    clock.t = 1003.05
    send("b", 3, 50 + 1.95 * 50, tokens=1)
    clock.t = 1003.1
    send("a", 4, 300)
    got = points()
    assert got[1001.0]["admittedMsgsPerSecond"] == pytest.approx(150)
    # b's 50 msgs/s over 1001.1 .. 1003.05 counts in slot 1002 too, which it skipped (was 100, b missing)
    assert got[1002.0]["admittedMsgsPerSecond"] == pytest.approx(150) and got[1002.0]["participants"] == 2
    assert got[1003.0]["admittedMsgsPerSecond"] == pytest.approx(150)
    assert got[1002.0]["tokensMsgs"] == 0 + 4            # b's level then: that of its report before the gap
    assert got[1003.0]["tokensMsgs"] == 0 + 1
    clock.t = 1003.6                    # another report of b in slot 1003 refines the rate of the whole span
    send("b", 4, 50 + 2.5 * 80, tokens=2)
    got = points()
    assert got[1002.0]["admittedMsgsPerSecond"] == pytest.approx(180)
    assert got[1003.0]["admittedMsgsPerSecond"] == pytest.approx(180)
    clock.t = 1004.1
    send("a", 5, 400)
    assert points()[1002.0]["admittedMsgsPerSecond"] == pytest.approx(180)   # kept when the slot closed


def test_the_history_keeps_what_it_reads_of_a_report_not_the_report() -> None:
    """A report of an earlier slot is the base of the next slot's rates; the history keeps its counters' totals
    and tokens only. Kept whole, it was a second report per participant beside the live one."""
    clock = FakeClock(1000.0)
    live = LiveState(1.0, clock)
    counters = [{"level": "topic", "name": "t/n/x", "kind": "publish", "admitted_msgs_total": 0}]
    sent = []
    for seq in (1, 2, 3):
        clock.t = 1000.0 + seq
        counters[0]["admitted_msgs_total"] = 100 * seq
        sent.append(report_at(clock, pid="a", seq=seq, counters=counters))
        assert live.ingest(sent[-1])[0]
    live.settle()
    assert live.history(level="topic")["series"][0]["points"][-1]["admittedMsgsPerSecond"] == pytest.approx(100)
    # the two reports the live state has moved past, and one it never saw: referred to alike (by this list, the
    # loop's variable and getrefcount's argument)
    reports = [sent.pop(0), sent.pop(0), report_at(clock, pid="b", seq=1, counters=counters)]
    counts = [sys.getrefcount(r) for r in reports]
    assert counts[:2] == [counts[2]] * 2, counts


def test_a_slot_whose_only_report_came_just_after_an_extra_one_is_measured_over_an_interval() -> None:
    """100 msgs/s in sends of 10 every 0.1 s, reports every second, and an extra one (a task asking for fresh
    shares) at 1001.98, just before slot 1002's edge: slot 1002's only report (1002.01) is measured from the
    report slot 1001 was measured from (1000.98), not over the 30 ms that hold one send (333 msgs/s)."""
    clock = FakeClock(1000.0)
    live = LiveState(1.0, clock)

    def send(seq: int, t: float) -> None:
        clock.t = t
        admitted = 10.0 * int(round((t - 1000.0) * 1000) // 100)    # a send of 10 at each tenth of a second
        counters = [{"level": "topic", "name": "t/n/x", "kind": "publish", "admitted_msgs_total": admitted}]
        assert live.ingest(report_at(clock, pid="a", seq=seq, counters=counters))[0]

    for seq, t in enumerate((1000.02, 1000.98, 1001.5, 1001.98, 1002.01, 1003.02, 1004.02), start=1):
        send(seq, t)
    got = {p["t"]: p["admittedMsgsPerSecond"] for p in live.history(level="topic")["series"][0]["points"]}
    assert got[1002.0] == pytest.approx((200 - 90) / 1.03)           # was (200 - 190) / 0.03 = 333
    assert got[1001.0] == pytest.approx(100, rel=0.02) and got[1003.0] == pytest.approx(100 / 1.01)
    assert all(v == pytest.approx(100, rel=0.1) for t, v in got.items() if t >= 1001.0), got


def test_resource_group_allocation_is_fair_by_demand() -> None:
    clock = FakeClock()
    live = LiveState(1.0, clock)
    live.ingest(report_at(clock, pid="a", usage=[usage("rg", 70, 70)]))
    live.ingest(report_at(clock, pid="b", usage=[usage("rg", 30, 70)]))
    ps = PolicySet(version=7, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=100)},
                   namespaceResourceGroups={"t/n": "rg"})
    view = views.resource_groups(live, ps).model_dump()["resourceGroups"][0]
    assert view["namespaces"] == ["t/n"]
    parts = view["publish"]["participants"]
    assert parts["a"]["allocation_msgs_per_s"] == pytest.approx(50)
    assert parts["b"]["allocation_msgs_per_s"] == pytest.approx(50)
    assert parts["a"]["allocation_bytes_per_s"] == -1     # unlimited dimension
    assert view["dispatch"]["participants"] == {}
    clock.t += 2.5                                          # both silent for more than 2 intervals: expired
    assert views.resource_groups(live, ps).resourceGroups[0].publish.participants == {}


def test_history_is_bounded_and_forgets_old_limiters(monkeypatch: pytest.MonkeyPatch) -> None:
    from controlplane import history, state

    monkeypatch.setattr(history, "MAX_SERIES", 3)
    clock = FakeClock(5000.0)
    live = LiveState(1.0, clock)

    def bucket(name: str) -> dict[str, Any]:
        return {"level": "topic", "name": name, "kind": "publish",
                "msgs": {"tokens": 1, "rate": 1, "capacity": 1, "period_s": 1}}

    live.ingest(report_at(clock, pid="a", buckets=[bucket(n) for n in ("x", "y", "z", "w")]))
    assert {s["name"] for s in live.history()["series"]} == {"x", "y", "z"}        # full: w not tracked
    clock.t += state.HISTORY_S + 5
    live.ingest(report_at(clock, pid="a", seq=2, buckets=[bucket("w")]))
    assert {s["name"] for s in live.history()["series"]} == {"w"}                  # old ones pruned, w admitted


def test_a_full_history_looks_for_limiters_to_forget_once_a_slot_not_once_a_new_limiter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from controlplane import history

    monkeypatch.setattr(history, "MAX_SERIES", 3)
    passes: list[int] = []
    prune = history.History._prune
    monkeypatch.setattr(history.History, "_prune", lambda self, index: (passes.append(index), prune(self, index)))
    clock = FakeClock(5000.0)
    live = LiveState(1.0, clock)
    counters = [{"level": "topic", "name": f"t{i}", "kind": "publish", "admitted_msgs_total": i} for i in range(50)]
    live.ingest(report_at(clock, pid="a", counters=counters))
    live.ingest(report_at(clock, pid="b", counters=counters))     # the same slot: 47 untracked limiters each
    assert len(passes) == 1 and len(live.history()["series"]) == 3
    clock.t += 1.0
    live.ingest(report_at(clock, pid="a", seq=2, counters=counters))
    live.settle()                                                    # (recorded once its answer is out)
    assert len(passes) == 2                                          # the next slot may free some: one more pass


def test_the_history_read_a_few_limiters_at_a_time_is_the_history_read_at_once() -> None:
    clock = FakeClock(1000.0)
    live = LiveState(1.0, clock)
    names = [f"t/n/x{i}" for i in range(5)]
    for step in range(6):
        for pid in ("a", "b"):
            live.ingest(report_at(clock, pid=pid, seq=step + 1, counters=[
                {"level": "topic", "name": n, "kind": "publish", "admitted_msgs_total": 100.0 * step * (i + 1),
                 "throttle_time_seconds_total": 0.0, "throttled_count": 0} for i, n in enumerate(names)]))
        clock.t += 1.0
    steps = live.history_steps(level="topic", per_step=2)
    pauses = 0
    while True:
        try:
            assert next(steps) is None
            pauses += 1
        except StopIteration as done:
            view = done.value
            break
    assert pauses == 3 and view == live.history(level="topic")
    assert [s["name"] for s in view["series"]] == names and len(view["series"][0]["points"]) >= 3
    assert views.run(live.history_steps(name="t/n/x3")) == live.history(name="t/n/x3")


def test_the_history_and_the_listener_get_a_report_after_its_answer_yet_every_reader_sees_it() -> None:
    """``ingest`` leaves the history and the listener to ``settle`` (after the answer went out); a read, an expiry
    or a departure before that does them first, in the order the reports came."""
    clock = FakeClock(1000.0)
    live = LiveState(1.0, clock)
    told: list[tuple[int, int]] = []

    class Listener:
        def replaced(self, previous: Report, current: Report) -> None:
            told.append((previous.seq, current.seq))

        def departed(self, report: Report, why: str) -> None:
            told.append((report.seq, -1))

    live.listener = Listener()

    def counters(msgs: float) -> list[dict[str, Any]]:
        return [{"level": "topic", "name": "t/n/x", "kind": "publish", "admitted_msgs_total": msgs}]

    live.ingest(report_at(clock, pid="a", counters=counters(100)))
    clock.t += 1.0
    live.ingest(report_at(clock, pid="a", seq=2, counters=counters(150)))
    assert told == []                                          # the answer does not wait for them
    live.settle()
    assert told == [(1, 2)]
    clock.t += 1.0
    live.ingest(report_at(clock, pid="a", seq=3, counters=counters(190)))
    assert [p["admittedMsgsPerSecond"] for p in live.history()["series"][0]["points"]][-1] == pytest.approx(40.0)
    assert told == [(1, 2), (2, 3)]                            # a read did them first
    # a departure with a report not yet recorded: recorded before the history forgets the participant, so a new
    # process under its id starts afresh (measured from the departed one's report, it would read 1,000 - 230 a second)
    clock.t += 1.0
    live.ingest(report_at(clock, pid="a", seq=4, counters=counters(230)))
    assert live.goodbye("a")
    assert told == [(1, 2), (2, 3), (3, 4), (4, -1)]
    clock.t += 1.0
    live.ingest(report_at(clock, pid="a", seq=1, counters=counters(1000)))
    live.settle()
    assert live.history()["series"][0]["points"][-1]["admittedMsgsPerSecond"] is None
