"""benchmarks.shared.windows.combined: how repeated runs of one workload make its rows."""

from __future__ import annotations

from benchmarks.shared.windows import combined


def test_repeated_runs_show_each_figures_median_and_the_worst_window_of_all() -> None:
    runs = [{"worst": 1.0, "after_mean": 0.90, "lost": 0.0}, {"worst": 1.1, "after_mean": 0.80, "lost": 2.0},
            {"worst": 1.05, "after_mean": 0.95, "lost": 0.0}]
    assert combined(runs) == {"worst": 1.1, "after_mean": 0.90, "lost": 2.0, "runs": 3}
    assert combined(runs[:1]) is runs[0]                # one run: its own figures, no count


def test_a_figure_only_some_runs_have_is_the_median_of_those() -> None:
    # (a run in which no worker ended two tasks has no grant-request rate)
    runs = [{"worst": 1.0}, {"worst": 1.05, "requests_per_s": 30.0}, {"worst": 1.0, "requests_per_s": 40.0}]
    assert combined(runs) == {"worst": 1.05, "requests_per_s": 35.0, "runs": 3}
