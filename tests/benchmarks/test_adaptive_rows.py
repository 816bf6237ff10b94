"""The adaptive benchmark's rows: one kind's figures over repeated runs are their medians, every run shown; the
repeats meet the capacity's changes at different points of the rate's probe cycle; the time after the capacity
was reached is split into what the sink was not asked for (paused by a refusal, or between micro-batches)."""

from __future__ import annotations

import math

import pytest

from benchmarks.bench_adaptive import (
    PHASES,
    SHIFTS_S,
    figures,
    median_of,
    phases_of_repeat,
    rows_for,
    silent_shares,
)

pytestmark = pytest.mark.unit


def _figures(reach_0: float, after_mean: float, reach_1: float) -> dict[str, float]:
    return {"reach_0": reach_0, "after_mean": after_mean, "after_refused": 0.002, "after_paused": 0.08,
            "after_idle": 0.04, "reach_1": reach_1, "reach_2": 5.0, "taken": 25000.0, "refused_share": 0.012}


def test_repeated_runs_read_as_their_medians_with_every_run_in_the_note() -> None:
    runs = [_figures(6, 0.93, math.inf), _figures(9, 0.81, 11), _figures(6, 0.88, 8)]
    rows = {r["name"].split(": ", 1)[1]: r for r in rows_for({"ours": median_of(runs)}, PHASES)}
    reach = rows["seconds to take >= 0.9 of the capacity"]
    assert reach["value"] == 6 and reach["ok"] is True
    assert reach["note"] == "the median of 3 runs: 6, 6, 9"
    taken = rows["taken / capacity after that"]
    assert taken["value"] == 0.88 and taken["ok"] is False                 # the median, not the best run
    assert taken["note"] == "the median of 3 runs: 0.81, 0.88, 0.93"
    follow = rows["seconds to follow 700 -> 1,200"]
    assert follow["value"] == 11 and follow["ok"] is False
    assert follow["note"].endswith("8, 11, inf")                           # a run that never followed says so
    assert rows["refused over the run"]["note"] == "the median of 3 runs: 1.2, 1.2, 1.2"
    names = list(rows)   # where the time after convergence went: right after what it was taken and refused
    assert names[3:5] == ["time paused after that (a refusal's Retry-After)", "time not asked after that (Spark's gaps)"]
    assert rows["time paused after that (a refusal's Retry-After)"]["value"] == 8


def test_only_the_limit_that_pauses_every_sender_says_where_its_time_went() -> None:
    rows = rows_for({"ours": _figures(6, 0.93, 9), "none": _figures(math.inf, 0.8, math.inf)}, PHASES)
    paused = [r["name"] for r in rows if "time paused" in r["name"]]
    assert paused == ["sink of 700/s (Retry-After), limit 2,000 [ours]: time paused after that (a refusal's "
                      "Retry-After)"]


def test_a_single_run_has_no_spread_note() -> None:
    rows = rows_for({"ours": _figures(6, 0.93, 9)}, PHASES)
    assert all(r["note"] == "" for r in rows)
    assert rows[1]["value"] == 0.93 and rows[1]["ok"] is True


def test_each_repeat_changes_the_capacity_at_another_point_of_the_probe_cycle() -> None:
    firsts = [phases_of_repeat(PHASES, i)[0] for i in range(4)]
    assert firsts == [(700.0, 20.0), (700.0, 23.0), (700.0, 26.0), (700.0, 20.0)]
    assert all(phases_of_repeat(PHASES, i)[1:] == PHASES[1:] for i in range(4))   # the later phases as they were
    assert all(float(s).is_integer() for s in SHIFTS_S)   # (the figures count whole seconds from each change)


def _steady(start: float, end: float, every_s: float = 0.03) -> list[tuple[float, int, bool]]:
    n = round((end - start) / every_s)
    return [(start + i * every_s, 20, True) for i in range(n)]


def test_the_silences_after_a_refusal_are_pauses_and_the_others_spark_gaps() -> None:
    # 10 s answered every 30 ms, but for a refusal at 3.0 s followed by a second's pause, and a 0.3-s gap at 7.0 s
    answers = _steady(0.0, 3.0) + [(3.0, 20, False)] + _steady(4.0, 7.0) + _steady(7.3, 10.0)
    paused, idle = silent_shares(answers, 0.0, 10.0)
    assert math.isclose(paused, 0.1, abs_tol=1e-6)
    assert math.isclose(idle, 0.033, abs_tol=1e-6)   # from the last answer before the gap (6.97 s) to 7.3 s
    assert silent_shares(_steady(0.0, 10.0), 0.0, 10.0) == (0.0, 0.0)       # answers 30 ms apart: never silent
    assert silent_shares(answers, 4.0, 7.0) == (0.0, 0.0)                   # only the span asked for counts


def test_the_first_phase_says_where_the_time_after_the_capacity_was_reached_went() -> None:
    # 700/s taken from the start (35 answers of 20 a second), a refusal and its second of pause at 10 s
    answers = _steady(0.0, 10.0, 1 / 35) + [(10.0, 20, False)] + _steady(11.0, 20.0, 1 / 35)
    out = figures(answers, 0.0, ((700.0, 20.0), (1200.0, 10.0), (400.0, 10.0)))
    assert out["reach_0"] == 0
    assert math.isclose(out["after_paused"], 1 / 20, abs_tol=0.002)
    assert out["after_idle"] == 0
    assert math.isclose(out["after_mean"], 19 / 20, abs_tol=0.01)


def test_ours_must_deliver_more_than_no_adaptation_on_both_sinks_against_the_one_kind_of_run() -> None:
    ours = {**_figures(6, 0.93, 9), "taken": 27000.0}
    none = {**_figures(math.inf, 0.8, math.inf), "taken": 30000.0, "refused_share": 0.7}
    first = {r["name"]: r for r in rows_for({"ours": ours, "none": none}, PHASES)}
    missed = first["Retry-After: delivered over the run, ours / none"]
    assert missed["value"] == 0.9 and missed["goal"] == ">= 1" and missed["ok"] is False and missed["note"] == ""
    # the sink with retry-after-ms: no adaptation's runs are those of the first sink, compared, not shown again
    more = {**ours, "taken": 36000.0}
    second = {r["name"]: r for r in rows_for({"ours": more}, PHASES, "+ retry-after-ms", none)}
    met = second["+ retry-after-ms: delivered over the run, ours / none"]
    assert met["value"] == 1.2 and met["ok"] is True and "Retry-After sink" in met["note"]
    assert second["+ retry-after-ms: refused over the run, ours - none"]["ok"] is True
    assert not any("[none]" in name for name in second)
    assert "+ retry-after-ms: delivered over the run, ours / alone" not in second   # (no runs of that kind given)
