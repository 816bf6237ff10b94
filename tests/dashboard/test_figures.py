"""Figure builders on history points and table rows: the expected traces, debt below zero marked, limits drawn,
empty data handled; the points as ``data.history`` gives them (``HistoryPoint``s)."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from dashboard import figures
from protocol.state import HistoryPoint, HistorySeries

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


def points_json(**series: list[float | None]) -> list[dict]:
    """History points as /v1/state/history sends them: one value per field per point."""
    n = len(next(iter(series.values())))
    return [{"t": T0 + i, **{k: v[i] for k, v in series.items()}} for i in range(n)]


def points(**series: list[float | None]) -> list[HistoryPoint]:
    return [HistoryPoint.model_validate(p) for p in points_json(**series)]


def trace(fig: go.Figure, name: str):  # type: ignore[no-untyped-def]
    return next(t for t in fig.data if t.name == name)


def test_tokens_figure_marks_debt_below_zero_in_red_down_to_a_zero_line() -> None:
    fig = figures.tokens_figure(points(tokensMsgs=[10.0, 2.0, -5.0, -1.0, 3.0]), "msgs", capacity=20)
    assert [t.name for t in fig.data] == ["tokens", "debt (below zero)", "capacity"]
    assert list(trace(fig, "tokens").y) == [10.0, 2.0, -5.0, -1.0, 3.0]
    debt = trace(fig, "debt (below zero)")
    assert list(debt.y) == [0.0, 0.0, -5.0, -1.0, 0.0] and debt.fill == "tozeroy"
    assert debt.fillcolor == figures.DEBT_COLOR and debt.line.color == figures.RED
    assert any(s.type == "line" and s.y0 == 0 and s.y1 == 0 for s in fig.layout.shapes)   # the zero line
    assert list(trace(fig, "capacity").y) == [20, 20]
    assert fig.layout.uirevision == "tokens"


def test_tokens_figure_of_bytes_and_of_an_unlimited_bucket() -> None:
    fig = figures.tokens_figure(points(tokensMsgs=[1.0, 2.0], tokensBytes=[-300.0, 50.0]), "bytes")
    assert list(trace(fig, "debt (below zero)").y) == [-300.0, 0.0]
    unlimited = figures.tokens_figure(points(tokensMsgs=[None, None]), "msgs")
    assert not unlimited.data and "unlimited" in unlimited.layout.annotations[0].text


def test_rate_vs_limit_and_throttled_figures() -> None:
    pts = points(admittedMsgsPerSecond=[30.0, 40.0, 41.0], throttledPerSecond=[0.0, 2.0, 5.0])
    fig = figures.rate_vs_limit_figure(pts, 40.0, "msgs", uirevision="k")
    assert list(trace(fig, "admitted msgs/s").y) == [30.0, 40.0, 41.0]
    assert list(trace(fig, "limit").y) == [40.0, 40.0] and trace(fig, "limit").line.dash == "dash"
    assert fig.layout.uirevision == "k"
    assert [t.name for t in figures.rate_vs_limit_figure(pts, None).data] == ["admitted msgs/s"]
    bars = figures.throttled_figure(pts)
    assert bars.data[0].type == "bar" and list(bars.data[0].y) == [0.0, 2.0, 5.0]
    fig = figures.rate_vs_limit_figure(points(admittedMsgsPerSecond=[1.0, 2.0], admittedBytesPerSecond=[10.0, 20.0]),
                                       None, "bytes")
    assert list(trace(fig, "admitted bytes/s").y) == [10.0, 20.0]


def test_overview_figures_one_trace_per_limiter_and_admitted_vs_limit() -> None:
    series = [HistorySeries(level="topic", kind="publish", name="a/b/c", points=points(throttleSecondsPerSecond=[1, 2])),
              HistorySeries(level="tenant", kind="publish", name="a", points=points(throttleSecondsPerSecond=[0, 1]))]
    fig = figures.throttle_time_figure(series, ["topic a/b/c", "tenant a"])
    assert [(t.name, list(t.y)) for t in fig.data] == [("topic a/b/c", [1.0, 2.0]), ("tenant a", [0.0, 1.0])]
    assert [t.name for t in figures.throttle_time_figure(series).data] == ["topic a/b/c", "tenant a"]
    rows = [{"target": "topic a/b/c", "admitted msgs/s": 39.5, "limit msgs/s": 40.0}]
    fig = figures.admitted_vs_limit_figure(rows)
    assert [(t.name, list(t.y)) for t in fig.data] == [("admitted", [39.5]), ("limit", [40.0])]
    top = figures.top_throttled_figure([{"target": "topic a/b/c", "throttle s/s": 1.5}])
    assert top.data[0].orientation == "h" and list(top.data[0].x) == [1.5]


def test_queue_shares_and_resource_group_figures() -> None:
    queue = figures.queue_figure([{"position": 1, "producer": "p1", "waiting s": 0.8},
                                  {"position": 2, "producer": "p2", "waiting s": 0.2}])
    assert list(queue.data[0].y) == ["1. p1", "2. p2"] and queue.layout.yaxis.autorange == "reversed"
    shares = figures.shares_figure({"a": 30.0, "b": 10.0}, 0.8)
    assert list(shares.data[0].x) == [75.0, 25.0] and "Jain's index 0.800" in shares.layout.title.text
    assert any(s.x0 == 50 for s in shares.layout.shapes)      # the equal share
    rg = figures.resource_group_figure([{"participant": "p", "usage msgs/s": 20, "demand msgs/s": 30,
                                         "quota msgs/s": 20}])
    assert [t.name for t in rg.data] == ["usage", "demand", "computed quota"]


def test_offload_and_mutation_figures() -> None:
    pts = points(admittedBytesPerSecond=[1e5, 3e5], throttledPerSecond=[0.0, 4.0])
    fig = figures.offload_figure(pts, 3e5)
    assert [t.name for t in fig.data] == ["read bytes/s", "permits", "limited reads/s"]
    assert fig.data[2].yaxis == "y2"        # limited reads on the secondary axis
    assert [t.name for t in figures.offload_figure(pts, -1).data] == ["read bytes/s", "limited reads/s"]
    fig = figures.mutation_figure([{"user": "alice", "client id": "etl", "tokens": -6.0, "throttle s": 3.0},
                                   {"user": "bob", "client id": "ui", "tokens": 50.0, "throttle s": 0.0}])
    tokens, throttle = fig.data
    assert list(tokens.x) == ["alice / etl", "bob / ui"] and list(tokens.marker.color) == [figures.RED, figures.BLUE]
    assert list(throttle.y) == [3.0, 0.0]


@pytest.mark.parametrize("build", [
    lambda: figures.tokens_figure([]), lambda: figures.rate_vs_limit_figure([], 1.0),
    lambda: figures.throttled_figure([]), lambda: figures.throttle_time_figure([]),
    lambda: figures.admitted_vs_limit_figure([]), lambda: figures.top_throttled_figure([]),
    lambda: figures.queue_figure([]), lambda: figures.shares_figure({}, None),
    lambda: figures.resource_group_figure([]), lambda: figures.offload_figure([], None),
    lambda: figures.mutation_figure([])])
def test_every_figure_says_so_when_there_is_no_data(build) -> None:  # type: ignore[no-untyped-def]
    fig = build()
    assert isinstance(fig, go.Figure) and not fig.data and fig.layout.annotations


def test_an_adaptive_limit_draws_the_rate_it_learnt_beside_its_ceiling_and_the_sinks_answers() -> None:
    from protocol.state import AdaptiveTraceState

    doc = AdaptiveTraceState.model_validate({"limits": [{"key": "topic:publish:acme/web/api", "points": [
        {"t": T0 + i, "ratePerSecond": r, "ceilingPerSecond": 2000, "okPerSecond": ok, "throttledPerSecond": no}
        for i, (r, ok, no) in enumerate([(2000, 700, 1300), (1000, 700, 300), (665, 665, 0)])]}]})
    fig = figures.adaptive_figure(doc.limits[0].points, title="topic acme/web/api: learnt rate")
    assert list(trace(fig, "learnt rate").y) == [2000, 1000, 665]
    assert list(trace(fig, "ceiling (configured)").y) == [2000] * 3
    assert list(trace(fig, "refused by the sink /s").y) == [1300, 300, 0]
    assert list(trace(fig, "taken by the sink /s").y) == [700, 700, 665]
    empty = figures.adaptive_figure([])
    assert not empty.data and "nobody asked" in empty.layout.annotations[0].text
