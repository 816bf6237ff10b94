"""The adaptive benchmark's rows: one kind's figures over repeated runs are their medians, every run shown; the
repeats meet the capacity's changes at different points of the rate's probe cycle."""

from __future__ import annotations

import math

from benchmarks.bench_adaptive import PHASES, SHIFTS_S, median_of, phases_of_repeat, rows_for


def _figures(reach_0: float, after_mean: float, reach_1: float) -> dict[str, float]:
    return {"reach_0": reach_0, "after_mean": after_mean, "after_refused": 0.002, "reach_1": reach_1,
            "reach_2": 5.0, "taken": 25000.0, "refused_share": 0.012}


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


def test_a_single_run_has_no_spread_note() -> None:
    rows = rows_for({"ours": _figures(6, 0.93, 9)}, PHASES)
    assert all(r["note"] == "" for r in rows)
    assert rows[1]["value"] == 0.93 and rows[1]["ok"] is True


def test_each_repeat_changes_the_capacity_at_another_point_of_the_probe_cycle() -> None:
    firsts = [phases_of_repeat(PHASES, i)[0] for i in range(4)]
    assert firsts == [(700.0, 20.0), (700.0, 23.0), (700.0, 26.0), (700.0, 20.0)]
    assert all(phases_of_repeat(PHASES, i)[1:] == PHASES[1:] for i in range(4))   # the later phases as they were
    assert all(float(s).is_integer() for s in SHIFTS_S)   # (the figures count whole seconds from each change)
