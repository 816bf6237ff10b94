"""benchmarks.shared.windows: the figures of the shared-limit benchmark, on events made here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.shared.task_logs import read_task_logs
from benchmarks.shared.windows import (
    batch_spans,
    hold_time_s,
    longest_gap_s,
    lumps,
    mean_ratio,
    new_folder,
    pauses,
    requests_per_s,
    throttled_share,
    unused_room,
    window_sums,
    worst_window_ratio,
)

pytestmark = pytest.mark.unit


def steady(rate_per_s: float, t0: float, t1: float, rows: int = 100) -> list[tuple[float, float]]:
    step = rows / rate_per_s
    return [(t0 + i * step, rows) for i in range(int((t1 - t0) / step))]


def test_a_steady_stream_at_the_limit_reads_one() -> None:
    events = steady(1000, 0, 20)
    assert mean_ratio(events, 1000, 0, 20) == pytest.approx(1.0)
    assert worst_window_ratio(events, 1000, 0, 20) == pytest.approx(1.0)
    assert longest_gap_s(events, 0, 20) == pytest.approx(0.1)


def test_a_burst_straddling_two_fixed_seconds_is_caught_by_a_window_starting_at_an_event() -> None:
    # 1,000/s, plus 1,800 rows in 0.5..1.4: fixed seconds [0,1) and [1,2) would each show less than the worst
    events = sorted(steady(1000, 0, 10) + [(0.5 + 0.1 * i, 200) for i in range(9)])
    assert worst_window_ratio(events, 1000, 0, 10) == pytest.approx((1000 + 1800) / 1000)


def test_a_stall_and_the_under_use_it_causes() -> None:
    events = steady(1000, 0, 5) + steady(1000, 8, 10)
    assert longest_gap_s(events, 0, 10) == pytest.approx(3.1)
    # (the mean is over spans of 9 s placed anywhere in the 10: each holds 6,000 of the 9,000 it could)
    assert mean_ratio(events, 1000, 0, 10) == pytest.approx(6 / 9)


def test_hold_time_after_a_cut() -> None:
    # 1,000/s until 10.5, the cut to 300/s at 10: windows starting before 9.5 + ... hold from 10.5 on
    events = steady(1000, 0, 10.5) + steady(300, 10.5, 20)
    assert hold_time_s(events, 10.0, 300, 20) == pytest.approx(1.5, abs=0.11)
    assert hold_time_s(steady(300, 0, 20), 10.0, 300, 20) == 0.0
    assert hold_time_s(steady(1000, 0, 20), 10.0, 300, 20) == math.inf


def test_window_sums_start_at_every_event_in_the_span() -> None:
    sums = window_sums(steady(1000, 0, 3), 0, 3)
    assert [s for s, _ in sums][:3] == pytest.approx([0.0, 0.1, 0.2])
    assert all(n == pytest.approx(1000) for _, n in sums)


def test_read_events_merges_every_tasks_file(tmp_path: Path) -> None:
    (tmp_path / "1-a.log").write_text("2.5 100\n1.0 100\n")
    (tmp_path / "2-b.log").write_text("1.5 50\n\n")
    (tmp_path / "ignored.txt").write_text("0 1000\n")
    assert read_task_logs(tmp_path).events == [(1.0, 100.0), (1.5, 50.0), (2.5, 100.0)]


def test_throttled_share_is_the_waits_in_the_span_over_the_tasks_time(tmp_path: Path) -> None:
    (tmp_path / "1-a.log").write_text("1.0 100 0.5\n2.0 100 0.25\n9.0 100 3.0\n")
    (tmp_path / "2-b.log").write_text("1.5 100\n")            # a line without a wait waited nothing
    waits = read_task_logs(tmp_path).waits
    assert waits[:2] == [(1.0, 100.0, 0.5), (1.5, 100.0, 0.0)]
    # two tasks for 4 s: 8 s of task time, 0.75 s of it waiting (the 3-s wait at t=9 is outside the span)
    assert throttled_share(waits, 2, 0.0, 4.0) == pytest.approx(0.75 / 8)


def test_a_paced_tasks_batch_waited_the_sum_of_its_slices_waits_dated_at_its_last(tmp_path: Path) -> None:
    # the trickle's file: batch 0 in four slices (0.1 s in all), batch 1 whole; the greedy task's lines name none
    (tmp_path / "1-a.log").write_text("1.0 25 0.05 0\n1.1 25 0.0 0\n1.2 25 0.03 0\n1.3 25 0.02 0\n2.0 100 0.5 1\n")
    (tmp_path / "1-b.log").write_text("5.0 25 0.25 0\n")     # another task of the same worker: its own batch 0
    (tmp_path / "2-c.log").write_text("1.0 25 9.0\n")
    logs = read_task_logs(tmp_path)
    got = logs.paced_batches
    assert [(t, round(w, 6)) for t, w in got] == [(1.3, 0.1), (2.0, 0.5), (5.0, 0.25)]
    assert logs.waits[:2] == [(1.0, 25.0, 0.05), (1.0, 25.0, 9.0)]   # (the lines read as before too)


def test_a_paced_tasks_wait_is_a_row_and_redis_in_ours_slices_is_measured_beside_ours_without_a_goal() -> None:
    from benchmarks.shared.workloads import Workload, against_redis, rows_for
    w = Workload("two applications, tenant limit: a stream beside a trickle", "tenant",
                 ("ours", "redis", "redis-sliced"), apps=(0.0, 100.0))
    figures = {"mean": 0.94, "worst": 1.075, "gap_s": 0.2, "paced_wait_s": 0.15, "paced_wait_p90_s": 0.5}
    waited = next(r for r in rows_for(w, "redis-sliced", "local[2]", figures) if "paced" in r["name"])
    assert waited["value"] == pytest.approx(150) and waited["unit"] == "ms" and waited["note"].startswith("p90 500")
    # Redis charged in ours' 40ths is held to ours' window goal, and its comparison carries no goal of its own
    window = next(r for r in rows_for(w, "ours", "local[2]", figures) if "worst" in r["name"])
    assert window["goal"] == "<= 1.075"
    rows = against_redis(w, "local[2]", figures, {**figures, "mean": 0.93, "worst": 1.05}, peer="redis-sliced")
    assert [(r["name"].split(": ")[-1], round(r["value"], 3), r["goal"], r["ok"]) for r in rows] == [
        ("mean admitted, ours - redis-sliced", 1.0, "", None), ("worst 1-s window, ours - redis-sliced", 2.5, "", None)]


def test_a_comparison_whose_ours_or_peer_was_re_measured_without_it_is_dropped_from_the_table() -> None:
    from benchmarks.shared.workloads import LIMIT, Workload, against_redis, rows_for
    from benchmarks.table import stale_comparison
    w = Workload("stream, 1 topic, 4 tasks", "topic", ("ours", "redis", "redis-sliced"), partitions=4)
    ours, peer = {"mean": 0.99, "worst": 1.05}, {"mean": 0.98, "worst": 1.05}
    table = (rows_for(w, "ours", "local[2]", ours) + rows_for(w, "redis-sliced", "local[2]", peer)
             + against_redis(w, "local[2]", ours, peer, peer="redis-sliced")
             + against_redis(w, "cluster", ours, peer, peer="redis-sliced"))
    compared = [r["name"] for r in table if "ours - " in r["name"]]
    assert len(compared) == 4
    # ours re-measured alone on local[2]: its rows beside redis-sliced there are another hour's; the cluster's stay
    stale = stale_comparison(rows_for(w, "ours", "local[2]", {"mean": 0.995, "worst": 1.05}))
    assert [n for n in compared if stale(next(r for r in table if r["name"] == n))] == compared[:2]
    assert not any(stale(r) for r in table if "ours - " not in r["name"])
    # the peer re-measured alone is the same; both re-measured, with their comparison, keeps it (it is replaced)
    assert stale_comparison(rows_for(w, "redis-sliced", "local[2]", peer))(table[-4])
    both = (rows_for(w, "ours", "local[2]", ours) + rows_for(w, "redis-sliced", "local[2]", peer)
            + against_redis(w, "local[2]", ours, peer, peer="redis-sliced"))
    assert not any(stale_comparison(both)(r) for r in table)
    # another workload's or another peer's rows are not touched
    other = Workload("stream, 1 topic, 4 tasks, a limit of 10,000 a second", "topic", ("ours", "redis"),
                     limit_per_s=10 * LIMIT)
    assert not any(stale_comparison(rows_for(other, "ours", "local[2]", ours))(r) for r in table)
    assert not any(stale_comparison(rows_for(w, "redis", "local[2]", peer))(r) for r in table)


def test_a_batch_over_too_soon_is_measured_whole_and_its_mean_above_the_limit_misses() -> None:
    from benchmarks.shared.workloads import Workload, rows_for
    burst = steady(11_000, 100.0, 101.5)     # 8 tasks unthrottled: 16,500 rows in 1.5 s under a 1,000/s limit
    (t0, t1), worst = batch_spans(burst)
    assert (t0, t1) == (100.0, pytest.approx(101.5, abs=0.01))
    ratio = worst_window_ratio(burst, 1000, *worst)
    assert ratio == pytest.approx(11, rel=0.01)
    rows = rows_for(Workload("batch", "topic", ("ours",), sizes=[10] * 8), "ours", "local[2]",
                    {"mean": mean_ratio(burst, 1000, t0, t1), "worst": ratio, "gap_s": 0.0})
    assert [r["ok"] for r in rows] == [False, False]
    # a long one: the mean leaves out the start-up and the end, the worst window sees them
    ramp = [(200.0, 3000.0)] + steady(1000, 200.1, 210.0)
    (t0, t1), worst = batch_spans(ramp)
    assert t0 == 202.0 and mean_ratio(ramp, 1000, t0, t1) == pytest.approx(1.0, rel=0.02)
    assert worst_window_ratio(ramp, 1000, *worst) >= 3.9


def test_spark_pauses_are_the_stretches_no_task_covers_and_a_mean_can_leave_them_out(tmp_path: Path) -> None:
    (tmp_path / "1-a.span").write_text("0.0 4.0\n")
    (tmp_path / "1-b.span").write_text("4.5 6.0\n")    # a gap of half a second: a stream between micro-batches
    (tmp_path / "2-c.span").write_text("8.5 12.0\n")   # 2.5 s with no task: the replacement executor starting
    (tmp_path / "2-d.span").write_text("broken\n")     # (a file cut short by a kill is skipped)
    spans = read_task_logs(tmp_path).spans
    assert spans == [(0.0, 4.0), (4.5, 6.0), (8.5, 12.0)]
    assert pauses(spans, 0.0, 12.0) == [(6.0, 8.5)]
    assert pauses(spans, 0.0, 14.0) == [(6.0, 8.5), (12.0, 14.0)]
    events = steady(1000, 0, 6) + steady(1000, 8.5, 12)
    assert mean_ratio(events, 1000, 2.0, 12.0) == pytest.approx(6.5 / 9)   # (spans of 9 s: 6,500 rows each)
    assert mean_ratio(events, 1000, 2.0, 12.0, less=pauses(spans, 2.0, 12.0)) == pytest.approx(1.0)


def test_beside_a_paced_task_the_gaps_are_the_greedy_jobs(tmp_path: Path) -> None:
    """A trickle's task runs the whole time (its lines name their batch); the greedy job's two tasks leave a gap of
    a second between them. Its gap is Spark's, not the trickle's sending: the room then is "no task"."""
    (tmp_path / "1-trickle.span").write_text("0.0 10.0\n")
    (tmp_path / "1-trickle.log").write_text("1.0 25 0.0 0\n2.0 25 0.1 1\n")
    (tmp_path / "2-a.span").write_text("0.0 4.0\n")
    (tmp_path / "2-a.log").write_text("1.0 25 0.0\n")
    (tmp_path / "2-b.span").write_text("5.0 10.0\n")
    (tmp_path / "2-b.log").write_text("6.0 25 0.0\n")
    logs = read_task_logs(tmp_path)
    assert logs.spans == [(0.0, 4.0), (0.0, 10.0), (5.0, 10.0)]
    assert logs.demand_spans == [(0.0, 4.0), (5.0, 10.0)]
    events = steady(10, 0, 4, rows=1) + steady(10, 5, 10, rows=1)
    waits = [(t, n, 0.0) for t, n in events]
    split = unused_room(events, waits, logs.demand_spans, 10.0, 2.0, 10.0)
    assert split["no task"] == pytest.approx(unused_room(events, waits, [(0.0, 4.0), (5.0, 10.0)], 10.0, 2.0, 10.0)
                                             ["no task"]) and split["no task"] > 0.05
    assert unused_room(events, waits, logs.spans, 10.0, 2.0, 10.0)["no task"] == 0.0   # (the trickle's)
    # every task paced (a stream whose demand is below the limit): their spans are Spark's
    (tmp_path / "2-a.log").write_text("1.0 25 0.0 0\n")
    (tmp_path / "2-b.log").write_text("6.0 25 0.0 0\n")
    logs = read_task_logs(tmp_path)
    assert logs.demand_spans == logs.spans


def test_an_executor_kill_has_its_goal_on_the_mean_while_a_task_ran() -> None:
    from benchmarks.shared.workloads import Workload, rows_for
    w = Workload("stream, one executor killed", "topic", ("ours", "redis"), during="executor")
    figures = {"mean": 0.8, "worst": 1.05, "gap_s": 2.4, "after_mean": 0.78, "after_paused_s": 1.9,
               "after_running_mean": 0.92}
    rows = {r["name"].split(": ", 1)[1]: r for r in rows_for(w, "ours", "cluster", figures)}
    assert rows["mean after the kill while a task ran / limit"]["ok"] is True
    assert "1.9 s" in rows["mean after the kill while a task ran / limit"]["note"]
    assert rows["mean after the kill / limit"]["ok"] is None          # Spark's pause in it: no goal
    assert rows["mean admitted / limit"]["ok"] is None
    assert rows["worst 1-s window / limit"]["ok"] is True
    missed = rows_for(w, "ours", "cluster", {**figures, "after_running_mean": 0.85})
    assert [r["ok"] for r in missed if "while a task ran" in r["name"]] == [False]
    assert all(r["ok"] is None for r in rows_for(w, "redis", "cluster", figures))   # the peers: measured only


def test_a_window_may_exceed_the_limit_by_a_twentieth_and_one_acquire_of_the_kind() -> None:
    from benchmarks.shared.workloads import Workload, rows_for
    w = Workload("stream, 1 topic, 2 tasks", "topic", ("ours", "redis"))

    def window(kind: str, worst: float) -> dict:
        return next(r for r in rows_for(w, kind, "local[2]", {"mean": 1.0, "worst": worst, "gap_s": 0.1})
                    if "worst" in r["name"])
    # ours sends a 40th of the limit at a time: 1.05 + 0.025
    assert window("ours", 1.075)["goal"] == "<= 1.075" and window("ours", 1.075)["ok"] is True
    assert window("ours", 1.1)["ok"] is False
    assert window("redis", 1.1)["goal"] == ""   # (the peers charge 100-row batches whole, and have no goal)
    # at ten times the limit a 100-row batch is a hundredth of it, less than ours' 40th: one acquire is the batch
    w = Workload("stream, 1 topic, 4 tasks, a limit of 10,000 a second", "topic", ("ours", "redis"),
                 limit_per_s=10_000)
    assert window("ours", 1.06)["goal"] == "<= 1.06" and window("ours", 1.06)["ok"] is True
    assert window("ours", 1.075)["ok"] is False


def test_requests_per_participant_are_counted_between_each_workers_first_and_last_task_in_the_span(
        tmp_path: Path) -> None:
    (tmp_path / "11.requests").write_text("9.0 5\n10.0 10\n12.0 50\n14.0 90\n30.0 500\n")   # 80 in 4 s
    (tmp_path / "12.requests").write_text("10.5 0\n12.5 20\n")                              # 20 in 2 s
    (tmp_path / "13.requests").write_text("11.0 7\n")                                          # one task: no rate
    assert requests_per_s(tmp_path, 10.0, 20.0) == pytest.approx(100 / 6)
    assert requests_per_s(tmp_path, 20.0, 25.0) is None


def test_a_mean_does_not_hang_on_where_the_span_ends_in_a_limiters_pattern() -> None:
    # a moving window's best under one of Spark's gaps: 1,000/s paced, nothing sent in 4.8..5.2, then the 400 that
    # came free at once and the pace again -- and so every second after (the window is spent 0.4 s before each
    # catch-up slides out). No 1-s window holds more than the limit
    events = [(i / 100, 10) for i in range(480)]
    for k in range(5):
        events += [(5.2 + k, 400)] + [(5.21 + k + i / 100, 10) for i in range(59)]
    events.sort()
    assert worst_window_ratio(events, 1000, 0, 9) == pytest.approx(1.0)
    ends = (5.0, 5.5, 6.0, 9.5, 10.0)
    plain = [sum(n for t, n in events if t < end) / (1000 * end) for end in ends]
    assert max(plain) - min(plain) > 0.03      # 0.96 to 0.998: the rows of [0, end) hang on where it ends
    means = [mean_ratio(events, 1000, 0, end) for end in ends]
    assert max(means) - min(means) < 0.015
    assert min(means) > 0.98


def test_ours_must_be_as_fully_used_and_as_accurate_as_the_central_exact_limiter_on_each_workload() -> None:
    from benchmarks.shared.workloads import LIMIT, Workload, against_redis
    stream = Workload("stream, 1 topic, 4 tasks", "topic", ("ours", "redis"), partitions=4)
    ours = {"mean": 0.9955, "worst": 1.075, "runs": 3}
    rows = {r["name"]: r for r in against_redis(stream, "local[2]", ours, {"mean": 0.9984, "worst": 1.1, "runs": 3})}
    used = rows["stream, 1 topic, 4 tasks [local[2]]: mean admitted, ours - redis"]
    assert used["value"] == pytest.approx(-0.29) and used["ok"] is False and used["goal"] == ">= 0"
    assert used["note"] == "the medians of 3 runs each"
    held = rows["stream, 1 topic, 4 tasks [local[2]]: worst 1-s window, ours - redis"]
    assert held["value"] == pytest.approx(-2.5) and held["ok"] is True and held["note"] == "the worst of 3 runs each"
    # a live cut: used during the cut; an executor killed: Spark's own pause is in the mean, only the windows count
    cut = Workload("stream, live cut to 30 % and back", "topic", ("ours", "redis"), during="cut")
    got = against_redis(cut, "cluster", {"cut_mean": 0.981, "mean": 0.9, "worst": 1.05},
                        {"cut_mean": 0.988, "mean": 0.99, "worst": 1.1})
    assert [(r["name"].split(": ")[1], round(r["value"], 3)) for r in got] == [
        ("mean admitted during the cut, ours - redis", -0.7), ("worst 1-s window, ours - redis", -5.0)]
    killed = Workload("stream, one executor killed", "topic", ("ours", "redis"), during="executor")
    assert [r["name"].split(": ")[1] for r in against_redis(killed, "cluster", ours, ours)] == [
        "worst 1-s window, ours - redis"]
    # demand below the limit: every window and every mean is below it, nothing to compare
    below = Workload("stream, demand 60 % of the limit", "topic", ("ours", "redis"), pace_per_task=0.3 * LIMIT)
    assert against_redis(below, "local[2]", ours, ours) == []


def test_a_stream_of_two_micro_batches_a_window_runs_on_local_alone_beside_both_others() -> None:
    """Micro-batches of half the limit: on local[2] Spark's own pace is above the limit (1.08-1.46x), on the
    cluster about the limit itself, where no limiter binds and a mean says nothing of one."""
    from benchmarks.shared.workloads import LIMIT, workloads
    name = "stream, 1 topic, 4 tasks, micro-batches of half the limit"
    local = {w.name: w for w in workloads(quick=False)}
    half = local[name]
    assert half.rows_per_batch == LIMIT // 2 and half.sizes is None and half.partitions == 4
    assert half.kinds == ("ours", "static", "redis") and half.repeats > 1
    assert name not in {w.name for w in workloads(quick=False, cluster=True)}
    # and micro-batches of a window and a half (the others' sends last a whole number of windows)
    longer = local["stream, 1 topic, 2 tasks, micro-batches of 1.5x the limit"]
    assert longer.rows_per_batch == 1.5 * LIMIT and longer.partitions == 2 and longer.repeats > 1
    assert longer.kinds == ("ours", "static", "redis")
    # every other stream keeps a window's worth of its limit a micro-batch
    assert all(w.rows_per_batch == w.limit_per_s for w in local.values() if w not in (half, longer))


def test_lumps_show_a_micro_batch_and_the_lone_chunk_that_ends_it() -> None:
    """A second's admissions as a stream of ours made them: 975 rows in acquires 12.5 ms apart, then one acquire
    that waited for the window until the second's end -- two lumps a second; a pause longer than the gap ends a
    lump, a shorter one does not."""
    events = []
    for second in range(3):
        events += [(second + 0.26 + 0.0125 * k, 25.0) for k in range(39)]   # 0.26-0.735 s: one lump of 975
        events.append((second + 1.005, 25.0))                               # the last chunk, waited for room
    got = lumps(sorted(events))
    assert [round(rows) for _, _, rows in got] == [975, 25] * 3
    assert got[0][0] == pytest.approx(0.26) and got[0][1] == pytest.approx(0.26 + 0.0125 * 38)
    assert lumps([(0.0, 5.0), (0.08, 5.0), (0.17, 5.0)]) == [(0.0, 0.08, 10.0), (0.17, 0.17, 5.0)]
    assert lumps([]) == []


def test_unused_room_is_what_the_mean_falls_short_by_split_by_what_spark_was_doing() -> None:
    """Half a limit of 10/s used, in the first half of each second: a task runs then (an admission a tenth of a
    second, the last of each second after a 0.2-s wait for the limiter), and none in the second half. The room is
    half the limit all along: a quarter of it while no task ran, a tenth while the task waited, the rest while it
    sent."""
    events = [(k + 0.05 + 0.1 * i, 1.0) for k in range(20) for i in range(5)]
    waits = [(t, n, 0.2 if round((t % 1) * 100) == 45 else 0.0) for t, n in events]
    spans = [(float(k), k + 0.5) for k in range(20)]
    got = unused_room(events, waits, spans, 10.0, 2.0, 12.0)
    assert got == pytest.approx({"no task": 0.25, "a task waiting": 0.10, "tasks sending": 0.15}, abs=0.005)
    assert sum(got.values()) == pytest.approx(1 - mean_ratio(events, 10.0, 2.0, 12.0), abs=0.005)


def test_a_streams_mean_row_says_where_the_rest_of_the_limit_went() -> None:
    from benchmarks.shared.workloads import Workload, rows_for
    stream = Workload("stream, 1 topic, 4 tasks", "topic", ("ours", "redis"), partitions=4)
    figures = {"mean": 0.974, "mean_low": 0.941, "mean_high": 0.982, "runs": 3, "worst": 1.05,
               "unused_gaps": 0.0122, "unused_waiting": 0.0139}
    mean = next(r for r in rows_for(stream, "ours", "local[2]", figures) if r["name"].endswith("mean admitted / limit"))
    assert mean["note"] == ("the median of 3 runs (0.941-0.982); unused: 1.22 points while no task ran, 1.39 while a "
                            "task waited")
    one_run = {"mean": 0.99, "worst": 1.05, "unused_gaps": 0.001, "unused_waiting": 0.002}
    mean = next(r for r in rows_for(stream, "redis", "local[2]", one_run) if "mean admitted" in r["name"])
    assert mean["note"] == "unused: 0.10 points while no task ran, 0.20 while a task waited"
    with_gaps = {**one_run, "spark_gap_s": 0.3849}   # (Spark's pace beside the mean: micro_batches)
    mean = next(r for r in rows_for(stream, "redis", "local[2]", with_gaps) if "mean admitted" in r["name"])
    assert mean["note"] == ("unused: 0.10 points while no task ran, 0.20 while a task waited; Spark's gap between "
                            "micro-batches 0.38 s on average")


def test_where_sparks_own_pace_is_below_the_limit_ours_is_to_admit_097_of_that_pace() -> None:
    """Sixteen Python workers on two cores: with no limiter at all the job sent 0.86 of the limit, and a goal of
    0.97 of the limit was no limiter's to meet. Where the same run measured the job's demand (the ``none`` kind),
    ours' goal is 0.97 of it -- of the limit where the demand exceeds the limit."""
    from benchmarks.shared.workloads import Workload, rows_for
    stream = Workload("stream, 1 topic, 16 workers", "topic", ("ours", "redis", "none"), partitions=16)
    figures = {"mean": 0.85, "worst": 1.04, "runs": 3, "mean_low": 0.8, "mean_high": 0.86}

    def mean_row(kind: str, r: dict, own_pace: float | None) -> dict:
        return next(row for row in rows_for(stream, kind, "local[2]", r, own_pace=own_pace)
                    if row["name"].endswith("mean admitted / limit"))
    slow = mean_row("ours", figures, own_pace=0.86)
    assert (slow["goal"], slow["ok"]) == ("0.834-1.075", True)
    assert slow["note"].endswith("Spark's own pace (no limiter, this run): 0.860 of the limit, the goal 0.97 of it")
    assert mean_row("ours", {**figures, "mean": 0.80}, own_pace=0.86)["ok"] is False
    fast = mean_row("ours", figures, own_pace=1.3)   # demand above the limit: 0.97 of the limit
    assert (fast["goal"], fast["ok"]) == ("0.97-1.075", False)
    assert mean_row("ours", figures, own_pace=None)["goal"] == "0.97-1.075"   # not measured: as before
    none = mean_row("none", {"mean": 0.86, "worst": 2.0}, own_pace=0.86)
    assert (none["goal"], none["ok"], none["note"]) == ("", None, "no limiter: Spark's own pace, the job's demand")


def test_the_none_kind_passes_every_batch_on_at_once_and_records_it(tmp_path) -> None:
    import pyarrow as pa

    from benchmarks.shared.kinds import arrow_fn
    from benchmarks.shared.task_logs import read_task_logs
    fn = arrow_fn("none", ("t",), str(tmp_path), limit_per_s=10)   # ten times the limit, in one go
    batches = [pa.RecordBatch.from_pydict({"v": list(range(50))}) for _ in range(2)]
    assert [b.num_rows for b in fn(iter(batches))] == [50, 50]
    assert [(rows, waited < 0.01) for _, rows, waited in read_task_logs(tmp_path).waits] == [(50, True), (50, True)]


def test_a_pattern_locked_to_the_window_leaves_no_room_while_spark_is_between_tasks() -> None:
    """Redis's shape: the whole limit in one lump at the start of each second, while a task runs, and nothing
    until the lump slides out: no room is ever free, whenever Spark pauses."""
    events = [(float(k), 10.0) for k in range(20)]
    spans = [(k - 0.01, k + 0.1) for k in range(20)]
    got = unused_room(events, [(t, n, 0.0) for t, n in events], spans, 10.0, 2.0, 12.0)
    assert sum(got.values()) == pytest.approx(0.0, abs=1e-9)


def test_the_shape_printer_reads_what_keep_admitted_kept(tmp_path: Path) -> None:
    import subprocess
    import sys

    run = tmp_path / "001-ours-local-2-stream"
    run.mkdir()
    (run / "1-a.log").write_text("100.0 25\n100.02 25 0.001\n101.5 25\n")
    for k, (start, end) in enumerate(((99.9, 100.03), (100.5, 100.6), (101.4, 101.6))):   # 0.47 and 0.8 s apart
        (run / f"1-{k}.span").write_text(f"{start} {end}\n")
    out = subprocess.run([sys.executable, "-m", "benchmarks.shared.windows", str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    assert "75 rows in 1.500 s" in out and "50 rows" in out and "(+1.500 s)" in out
    with_limit = subprocess.run([sys.executable, "-m", "benchmarks.shared.windows", str(tmp_path), "--limit", "50",
                                 "--skip-s", "0"], capture_output=True, text=True, check=True).stdout
    assert "unused room from 0 s on" in with_limit and "no task" in with_limit
    assert "Spark's gap between micro-batches from 0 s on: 0.635 s on average (0.470-0.800, 2 gaps)" in with_limit
    for flag, value, says in (("--limit", "0", "argument --limit: must be a number > 0"),
                              ("--skip-s", "nan", "--skip-s must be")):
        bad = subprocess.run([sys.executable, "-m", "benchmarks.shared.windows", str(tmp_path), flag, value],
                             capture_output=True, text=True)
        assert bad.returncode != 0 and says in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "benchmarks.shared.windows", str(tmp_path / "none")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "usage" in bad.stderr


def test_keep_admitted_wants_a_new_or_empty_folder(tmp_path: Path) -> None:
    import argparse

    assert new_folder(str(tmp_path / "new")) == tmp_path / "new"
    assert new_folder(str(tmp_path)) == tmp_path                      # empty
    (tmp_path / "old").mkdir()
    with pytest.raises(argparse.ArgumentTypeError, match="new or empty folder"):
        new_folder(str(tmp_path))
