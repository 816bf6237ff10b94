"""The report pace: the interval told to participants stretches when their reports would take more than their share
of the control plane's core, in whole steps of the configured interval, and comes back with headroom; and what the
live state and its history make of participants that follow a stretched interval."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controlplane.report_pace import MIN_REPORTS, SHRINK_WINDOWS, ReportPace
from controlplane.state import LiveState
from protocol import Report

from .conftest import PARTICIPANT
from .conftest import report as conftest_report

pytestmark = pytest.mark.unit


class Clocks:
    """The wall clock and the process's CPU clock, both moved by hand."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.cpu_s = 0.0

    def pace(self, floor_s: float = 1.0, most_s: float = 10.0, cpu_share: float = 0.6,
             waits: list[float] | None = None) -> ReportPace:
        """``waits``: the loop's p99 wait of each window in turn (measured: ``controlplane.loop_lag``)."""
        return ReportPace(floor_s, most_s, cpu_share, window_s=5.0, cpu_clock=lambda: self.cpu_s,
                          clock=lambda: self.now_s, waits=None if waits is None else (lambda _: waits.pop(0)))


def window(clocks: Clocks, pace: ReportPace, participants: int, cpu_per_report_s: float, reports: int = 100,
           grants_cpu_s: float = 0.0, live: int | None = None) -> float:
    """One window of ``reports`` reports of ``participants`` costing ``cpu_per_report_s`` each (and grant answers
    costing ``grants_cpu_s`` in all), ``live`` of them live (default: all); the interval the last report's answer
    tells."""
    told = pace.told_s
    for i in range(reports):
        clocks.cpu_s += cpu_per_report_s
        if i == reports // 2 and grants_cpu_s:
            clocks.cpu_s += grants_cpu_s
            pace.exclude(grants_cpu_s)
        if i == reports - 1:
            clocks.now_s += 5.0
        told = pace.interval_s(f"p{i % participants}", participants if live is None else live)
    return told


def test_few_participants_are_told_the_configured_interval() -> None:
    clocks = Clocks()
    pace = clocks.pace()
    assert window(clocks, pace, 100, 0.0004) == 1.0   # 100 x 0.4 ms: 4 % of a core
    assert pace.cpu_per_report_s == pytest.approx(0.0004)


def test_the_worked_example_stretches_to_whole_steps_and_comes_back_with_headroom() -> None:
    clocks = Clocks()
    pace = clocks.pace(cpu_share=0.8)
    assert window(clocks, pace, 3000, 0.00038) == 2.0    # needed 1.43 s
    assert window(clocks, pace, 2400, 0.00038) == 2.0    # needed 1.14 s: x 1.25 = 1.43 s does not fit in 1 s
    # 0.71 s x 1.25 = 0.89 s fits, but not what the windows before needed, until the last of them is 6 windows old
    assert [window(clocks, pace, 1500, 0.00038) for _ in range(SHRINK_WINDOWS)] == [2.0] * (SHRINK_WINDOWS - 1) + [1.0]
    assert window(clocks, pace, 1000, 0.0019) == 3.0     # a hundred limits each: 2.4 s, at once
    assert window(clocks, pace, 1000, 0.0016) == 3.0     # 2.0 s x 1.25 = 2.5 s: 2 s would be too close
    assert [window(clocks, pace, 1000, 0.0012) for _ in range(SHRINK_WINDOWS)] == [3.0] * (SHRINK_WINDOWS - 1) + [2.0]
    # (1.5 s x 1.25 = 1.9 s: fits in 2 s, once the 2.4 s and 2.0 s windows are 6 old)


def test_a_core_the_reports_fill_stretches_the_interval_though_participants_expired_while_they_waited() -> None:
    clocks = Clocks()
    pace = clocks.pace()
    # 1,000 participants of a hundred limits, 2 ms a report: 300 are live (the others' reports waited in the queue
    # past 2 intervals) -- whose 0.6 s would need no stretch -- but 1,000 reported in the window: 3.3 s
    assert window(clocks, pace, 1000, 0.002, reports=1000, live=300) == 4.0
    # 200 of them reported in a window the reports filled: 1 s x 100 % / 60 % = 1.7 s, then 2 s x 100 % / 60 %
    pace = clocks.pace()
    assert window(clocks, pace, 200, 0.002, reports=2500, live=100) == 2.0
    assert window(clocks, pace, 200, 0.002, reports=2500, live=100) == 4.0


def test_reports_of_participants_still_on_the_interval_told_before_do_not_stretch_it_while_the_core_has_room() -> None:
    clocks = Clocks()
    pace = clocks.pace(most_s=30.0, cpu_share=0.36)
    # 1,000 participants of a hundred limits, 2.11 ms a report, 2,000 reports in the window (84 % of a core): 5.9 s
    assert window(clocks, pace, 1000, 0.00211, reports=2000) == 6.0
    # the next window, each of them once (many still on 1 s): 42 % of the core, above the share of 36 %, but every
    # report due was answered, and 1,000 of them need 5.9 s still -- not 6 s x 42 % / 36 % = 7.0 s, told 8 s
    assert window(clocks, pace, 1000, 0.00211, reports=1000) == 6.0


def test_it_never_goes_past_the_longest_interval_and_is_never_stretched_when_that_is_the_configured_one() -> None:
    clocks = Clocks()
    assert window(clocks, clocks.pace(most_s=4.0), 100, 0.077) == 4.0   # needed 12.8 s
    fixed = clocks.pace(most_s=1.0)
    assert window(clocks, fixed, 3000, 0.001) == 1.0 and fixed.cpu_per_report_s is None


def test_grant_answers_cpu_is_not_counted_against_the_reports() -> None:
    clocks = Clocks()
    pace = clocks.pace()
    # 500 participants, 0.5 ms a report (0.42 s needed), and grant answers that took 3 s of the window
    assert window(clocks, pace, 500, 0.0005, grants_cpu_s=3.0) == 1.0
    assert pace.cpu_per_report_s == pytest.approx(0.0005)


def test_a_window_of_too_few_reports_or_too_short_changes_nothing() -> None:
    clocks = Clocks()
    pace = clocks.pace()
    assert window(clocks, pace, 3000, 0.1, reports=MIN_REPORTS - 1) == 1.0 and pace.cpu_per_report_s is None
    for _ in range(200):                       # a busy window still under way
        clocks.cpu_s += 0.1
        assert pace.interval_s("p", 3000) == 1.0
    clocks.now_s += 5.0
    assert pace.interval_s("p", 3000) == 10.0  # it ended


def test_a_measured_p99_over_the_goal_caps_the_share_until_the_interval_steps_and_a_low_one_lifts_it() -> None:
    """The module essay's example: 1,000 participants of 100 limits, 4.2 ms a report, told 6 s (70 % of a core),
    the loop's p99 wait 118 ms. The cap falls to 0.748 (still 6 s), then 0.699: 7 s; a window at 30 ms lifts it to
    the share setting again (and 7 s stays: 5.25 s x 1.25 does not fit in 6)."""
    clocks = Clocks()
    waits = [0.118, 0.118, 0.03]
    pace = clocks.pace(cpu_share=0.8, waits=waits)
    pace.told_s = 6.0
    told = []
    for _ in range(2):   # the reports due in a window of 5 s at the interval told
        told.append(window(clocks, pace, 1000, 0.0042, reports=round(1000 * 5 / pace.told_s)))
    assert told == [6.0, 7.0] and pace.cap == pytest.approx(0.699, abs=2e-3)
    assert pace.wait_p99_s == 0.118 and pace.share == pace.cap
    assert window(clocks, pace, 1000, 0.0042, reports=714) == 7.0 and pace.cap == 0.8 and waits == []


def test_a_long_wait_while_the_core_is_mostly_idle_is_not_the_reports_queue_and_caps_nothing() -> None:
    clocks = Clocks()
    pace = clocks.pace(cpu_share=0.8, waits=[0.5, 0.07])
    # a sweep held the loop half a second; the reports took 20 % of the core
    assert window(clocks, pace, 1000, 0.0042, reports=238) == 6.0 and pace.cap == 0.8
    # a p99 between half the goal and the goal, busy: the cap neither lowered nor lifted (4.2 s / 0.5: 9 s)
    pace.cap = 0.5
    assert window(clocks, pace, 1000, 0.0042, reports=833) == 9.0 and pace.cap == 0.5
    unmeasured = clocks.pace(cpu_share=0.8)
    assert window(clocks, unmeasured, 1000, 0.0042, reports=952) == 6.0 and unmeasured.wait_p99_s is None


def test_reports_that_alone_take_longer_than_the_goal_while_the_loop_never_waited_are_still_told_an_interval(
        ) -> None:
    # ten participants of 5,000 limits: 130 ms of CPU a report, a busy core, and a window whose p99 wait read 0
    # (once a ZeroDivisionError, and the report that ended the window answered 500)
    clocks = Clocks()
    pace = clocks.pace(cpu_share=0.8, waits=[0.0])
    assert window(clocks, pace, 10, 0.13, reports=35) == 10.0   # the longest: its own CPU is over the goal
    assert pace.wait_p99_s == 0.0 and pace.cap == 0.8          # and the queue's cap is left as it was


def test_a_window_of_too_few_reports_takes_its_own_waits_so_the_next_window_reads_only_its_own() -> None:
    clocks = Clocks()
    taken: list[float] = []

    def waits(window_s: float) -> float:
        taken.append(window_s)
        return 0.5 if len(taken) == 1 else 0.01   # the quiet window's sweep, then nothing
    pace = ReportPace(1.0, 10.0, 0.8, window_s=5.0, cpu_clock=lambda: clocks.cpu_s, clock=lambda: clocks.now_s,
                      waits=waits)
    assert window(clocks, pace, 1000, 0.0042, reports=MIN_REPORTS - 1) == 1.0 and pace.wait_p99_s is None
    assert window(clocks, pace, 1000, 0.0042, reports=952) == 6.0
    assert taken == [5.0, 5.0] and pace.wait_p99_s == 0.01 and pace.cap == 0.8


@pytest.mark.parametrize("args,message", [
    ((0.0, 10.0, 0.6), "floor_s must be a finite number of seconds > 0, got 0.0"),
    ((2.0, 1.0, 0.6), "most_s must be a finite number of seconds >= floor_s (2), got 1.0"),
    ((1.0, 10.0, 0.0), "cpu_share must be a fraction of a core > 0 and <= 1, got 0.0"),
    ((1.0, 10.0, 1.5), "cpu_share must be a fraction of a core > 0 and <= 1, got 1.5"),
    ((1.0, float("nan"), 0.6), "most_s must be a finite number of seconds >= floor_s (1), got nan"),
    ((1.0, 10.0, 0.6, {"p99_goal_s": 0.0}), "p99_goal_s must be a finite number of seconds > 0, got 0.0"),
])
def test_bad_arguments_say_what_is_allowed(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError) as e:
        ReportPace(*args[:3], **(args[3] if len(args) > 3 else {}))
    assert str(e.value) == message


# ---------------------------------------------------------------- the live state under a stretched interval


def report(pid: str, seq: int, sent_at: float, admitted: float, interval_s: float = 4.0) -> Report:
    return Report.model_validate({
        "participant": {"participant_id": pid, "application_id": "app", "executor_id": pid, "host": "h", "pid": 1},
        "seq": seq, "sent_at": sent_at, "interval_s": interval_s,
        "counters": [{"level": "topic", "name": "acme/web/t", "kind": "publish", "admitted_msgs_total": admitted}]})


def test_participants_told_a_longer_interval_expire_after_two_of_it_and_so_until_the_last_of_them_reported() -> None:
    now = [1000.0]
    live = LiveState(1.0, clock=lambda: now[0])
    live.tell(4.0)
    assert live.ingest(report("a", 1, now[0], 0))[0]
    now[0] += 7.5                            # silent for 7.5 s: less than 2 of its 4-s intervals
    assert live.participants == 1 and live.snapshot().peers
    assert live.ingest(report("a", 2, now[0] - 6.0, 0))[0]   # sent 6 s ago: within 2 intervals too
    live.tell(1.0)                           # "a" was told 4 s just now: it may be silent for 8 s still
    now[0] += 7.9
    assert [pid for pid, _ in live.snapshot().peers] == ["a"] and live.reach_s == 4.0
    now[0] += 0.2                            # 8 s after the change: it did not report within 2 of its 4-s ones
    assert live.snapshot().peers == [] and live.reach_s == 1.0 and live.stale_s == 2.0


def test_the_history_counts_every_participant_in_every_slot_it_spans_when_they_report_every_four_slots() -> None:
    """Four participants admitting 50 msgs/s each, reporting every 4 s at four different phases, slots of 1 s:
    the slots are 4 s long while participants may follow 4 s (each reports once a slot: one value a limiter where
    slots of 1 s took four, and a quarter of the slots to close), and every slot shown reads 200 msgs/s of four
    participants (the newest waits for the reports that will fill it). Slots closed one past a one-slot gap, as for
    reports every slot, would read 100: two of the four."""
    now = [1000.0]
    live = LiveState(1.0, clock=lambda: now[0])
    live.tell(4.0)
    seqs = dict.fromkeys("abcd", 0)
    for tick in range(40):                    # one of them a second, each every 4 s
        pid = "abcd"[tick % 4]
        seqs[pid] += 1
        now[0] = 1000.0 + tick + 0.5
        assert live.ingest(report(pid, seqs[pid], now[0], 50.0 * (now[0] - 1000.0)))[0]
    history = live.history(seconds=30.0)
    points = history["series"][0]["points"]
    assert history["intervalSeconds"] == 4.0   # what a point covers now
    # (the last 30 s: from 1009.5; the slot of 1036-1039 is not shown yet: a late report may still fill it)
    assert [p["t"] for p in points] == [1008.0, 1012.0, 1016.0, 1020.0, 1024.0, 1028.0, 1032.0]
    assert all(p["admittedMsgsPerSecond"] == pytest.approx(200.0) and p["participants"] == 4 for p in points)


def test_when_participants_are_told_the_configured_interval_again_the_slots_shorten_from_the_one_under_way() -> None:
    now = [1000.0]
    live = LiveState(1.0, clock=lambda: now[0])
    live.tell(4.0)
    seq = 0
    for t in (1000.5, 1004.5, 1008.5):
        seq += 1
        now[0] = t
        assert live.ingest(report("a", seq, t, 50.0 * (t - 1000.0)))[0]
    live.tell(1.0)                            # "a" may still follow 4 s for 8 s: the slots stay 4 s long until then
    for t in [1009.5 + i for i in range(12)]:
        seq += 1
        now[0] = t
        assert live.ingest(report("a", seq, t, 50.0 * (t - 1000.0), interval_s=1.0))[0]
    points = live.history(seconds=30.0)["series"][0]["points"]
    # 1000-1003 has no rate yet (its first report); 1004 and 1008 are 4 s long; from 1016 on, 1 s long
    assert [p["t"] for p in points] == [1000.0, 1004.0, 1008.0, 1012.0, 1016.0, 1017.0, 1018.0, 1019.0, 1020.0]
    assert all(p["admittedMsgsPerSecond"] == pytest.approx(50.0) for p in points[1:])


# ---------------------------------------------------------------- a real control plane, loaded


@pytest.mark.integration
@pytest.mark.parallel
def test_a_control_plane_whose_reports_take_more_than_their_share_tells_its_participants_to_report_less_often(
        start_cp: Any) -> None:
    """A real control plane allowed 5 % of a core for reports every 0.1 s, at most 0.3 s: 60 participants' reports
    (a third of a millisecond of its CPU each at least: 0.4 s of interval needed) are told the longest interval
    after its first 5-s window, and its health and participants views say so."""
    cp = start_cp(args=["--report-interval", "0.1", "--report-interval-max", "0.3", "--report-cpu-share", "0.05"])
    part = cp.client(PARTICIPANT)
    assert cp.client().get("/healthz").json()["reportIntervalSeconds"] == 0.1
    told, seq, started = 0.1, 0, time.monotonic()
    while told == 0.1 and time.monotonic() - started < 30:   # (sending reports: the load the window measures)
        seq += 1
        for i in range(60):
            answer = part.post("/v1/report", json=conftest_report(f"p{i}", seq=seq))
            assert answer.status_code == 200 and answer.json()["accepted"], answer.text
            told = answer.json()["reportIntervalSeconds"]
    assert told == 0.3   # (more is needed: it never tells more than the longest)
    assert cp.client().get("/healthz").json()["reportIntervalSeconds"] == told
    state = cp.client().get("/v1/state/participants").json()
    assert state["reportIntervalSeconds"] == told and len(state["participants"]) == 60


def test_slow_reports_are_given_the_share_of_a_core_at_which_their_queue_keeps_the_p99_goal() -> None:
    from controlplane.report_pace import waiting_share
    assert waiting_share(0.0004, 0.1) > 0.99                        # one limit: the share setting rules
    assert waiting_share(0.028, 0.1) == pytest.approx(1 / (1 + 4.605 * 0.028 / (2 * 0.072)), rel=1e-3)
    assert waiting_share(0.125, 0.1) == 0.0                         # one report alone misses the goal
    clocks = Clocks()
    pace = clocks.pace(cpu_share=0.8)
    # 100 participants of 1,000 limits, 28 ms a report: at 0.8 of a core, 3.5 s -> 4 s; at 0.53, 5.3 s -> 6 s
    assert window(clocks, pace, 100, 0.028) == 6.0 and pace.share == pytest.approx(0.528, abs=1e-3)
    slow = clocks.pace(cpu_share=0.8)
    assert window(clocks, slow, 10, 0.125) == 10.0                  # as long as it may be
