"""benchmarks.shared.windows.combined: how repeated runs of one workload make its rows."""

from __future__ import annotations

import pytest

from benchmarks.shared.windows import combined

pytestmark = pytest.mark.unit


def test_repeated_runs_show_each_figures_median_and_the_worst_window_of_all() -> None:
    runs = [{"worst": 1.0, "after_mean": 0.90, "lost": 0.0}, {"worst": 1.1, "after_mean": 0.80, "lost": 2.0},
            {"worst": 1.05, "after_mean": 0.95, "lost": 0.0}]
    assert combined(runs) == {"worst": 1.1, "after_mean": 0.90, "lost": 2.0, "runs": 3}
    assert combined(runs[:1]) is runs[0]                # one run: its own figures, no count


def test_a_figure_only_some_runs_have_is_the_median_of_those() -> None:
    # (a run in which no worker ended two tasks has no grant-request rate)
    runs = [{"worst": 1.0}, {"worst": 1.05, "requests_per_s": 30.0}, {"worst": 1.0, "requests_per_s": 40.0}]
    assert combined(runs) == {"worst": 1.05, "requests_per_s": 35.0, "runs": 3}


def test_a_streams_rows_give_the_median_mean_with_its_spread_and_the_worst_window_of_all_runs() -> None:
    from benchmarks.shared.workloads import Workload, rows_for
    runs = [{"mean": 0.965, "worst": 1.05}, {"mean": 0.983, "worst": 1.1}, {"mean": 0.990, "worst": 1.025}]
    figures = combined(runs)
    assert (figures["mean"], figures["mean_low"], figures["mean_high"]) == (0.983, 0.965, 0.990)
    rows = {r["name"].split(": ", 1)[1]: r for r in
            rows_for(Workload("stream, 1 topic, 2 tasks", "topic", ("ours",)), "ours", "local[2]", figures)}
    mean, worst = rows["mean admitted / limit"], rows["worst 1-s window / limit"]
    assert (mean["value"], mean["ok"], mean["note"]) == (0.983, True, "the median of 3 runs (0.965-0.990)")
    assert (worst["value"], worst["ok"], worst["note"]) == (1.1, False, "the worst of 3 runs")   # one run broke it
    single = rows_for(Workload("stream, 1 topic, 2 tasks", "topic", ("ours",)), "ours", "local[2]", runs[0])
    assert [r["note"] for r in single] == ["", ""]   # one run: no spread to tell


def test_a_below_the_limit_streams_throttle_row_gives_the_median_of_its_runs_with_their_spread() -> None:
    # (one run's throttle time is a few waits of a few ms: on the cluster one read 1.09 % and the next 0.43 %)
    from benchmarks.shared.workloads import LIMIT, Workload, rows_for
    below = Workload("stream, demand 60 % of the limit", "topic", ("ours",), pace_per_task=0.3 * LIMIT)
    runs = [{"mean": 0.63, "worst": 0.8, "throttled": 0.0109}, {"mean": 0.64, "worst": 0.8, "throttled": 0.0043},
            {"mean": 0.65, "worst": 0.8, "throttled": 0.0070}]
    figures = combined(runs)
    assert (figures["throttled"], figures["throttled_low"], figures["throttled_high"]) == (0.0070, 0.0043, 0.0109)
    throttle = next(r for r in rows_for(below, "ours", "local[2]", figures) if "throttle time" in r["name"])
    assert (throttle["value"], throttle["ok"]) == (0.0070, True)
    assert throttle["note"].endswith("; the median of 3 runs (0.0043-0.0109)")
    alone = next(r for r in rows_for(below, "ours", "local[2]", runs[0]) if "throttle time" in r["name"])
    assert (alone["ok"], alone["note"]) == (False, "time the tasks waited for the limiter while the aggregate was "
                                                   "below it")


class _Bench:
    """A bench that records the order of its runs; the kinds in ``failing`` raise at their second run."""

    where = "local[2]"

    def __init__(self, failing: tuple[str, ...] = ()) -> None:
        self.order: list[str] = []
        self.failing = failing

    def run(self, w: object, kind: str) -> dict[str, float]:
        self.order.append(kind)
        if kind in self.failing and self.order.count(kind) == 2:
            raise RuntimeError("the sink went away")
        return {"mean": 0.99 if kind == "ours" else 0.98, "worst": 1.05}


def test_a_workloads_kinds_run_in_rounds_so_a_drift_of_the_host_falls_on_each_alike() -> None:
    from benchmarks.shared.workloads import Workload, run_all
    w = Workload("stream, 1 topic, 2 tasks", "topic", ("ours", "static", "redis"), repeats=3)
    bench = _Bench()
    rows = run_all(bench, [w], None, {"ours", "redis"})
    assert bench.order == ["ours", "redis"] * 3
    means = {r["name"]: r for r in rows if r["name"].endswith("mean admitted / limit")}
    assert means["stream, 1 topic, 2 tasks [ours, local[2]]: mean admitted / limit"]["note"].startswith(
        "the median of 3 runs")
    assert any(r["name"].endswith("mean admitted, ours - redis") for r in rows)


def test_a_kind_that_fails_is_a_failed_row_and_runs_no_more_while_the_others_go_on() -> None:
    from benchmarks.shared.workloads import Workload, run_all
    w = Workload("stream, 1 topic, 2 tasks", "topic", ("ours", "static", "redis"), repeats=3)
    bench = _Bench(failing=("redis",))
    rows = run_all(bench, [w], None, None)
    assert bench.order == ["ours", "static", "redis", "ours", "static", "redis", "ours", "static"]
    failed = [r for r in rows if "failed" in r["name"]]
    assert len(failed) == 1 and "[redis, local[2]] failed: RuntimeError: the sink went away" in failed[0]["name"]
    assert not any("ours - redis" in r["name"] for r in rows)   # no comparison with a kind that failed
    assert any(r["name"].startswith("stream, 1 topic, 2 tasks [static, local[2]]") for r in rows)
