"""Pure figure builders: data in (history points and series, rows of dicts), a plotly ``Figure`` out.

How and why
-----------
No Streamlit and no HTTP here, so a notebook can draw the same charts from the same answer
(``figures.tokens_figure(HistoryState.model_validate(answer).series[0].points)``) and tests check traces
without a browser. History points are ``protocol.state.HistoryPoint``s, as ``data.history`` returns them: one
shape, read by attribute.

Conventions: time on x (the control plane's Unix seconds, shown as local time); a token balance below zero is
*debt* (PIP-322 lets a send overdraw the bucket and repays it from later refills), drawn as its own red trace
filled down to a black zero line so it cannot be mistaken for a low balance; limits are dashed lines; every
figure carries a ``uirevision`` so zoom and hidden legend entries survive the live refreshes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from protocol.state import AdaptivePoint, HistoryPoint, HistorySeries

__all__ = ["DEBT_COLOR", "tokens_figure", "rate_vs_limit_figure", "throttled_figure", "throttle_time_figure",
           "admitted_vs_limit_figure", "top_throttled_figure", "queue_figure", "shares_figure",
           "resource_group_figure", "shared_limit_figure", "offload_figure", "mutation_figure", "adaptive_figure"]

DEBT_COLOR = "rgba(214, 39, 40, 0.45)"
Points = Sequence[HistoryPoint]
RED, BLUE, GREY, GREEN, ORANGE = "#d62728", "#1f77b4", "#7f7f7f", "#2ca02c", "#ff7f0e"


def _layout(fig: go.Figure, title: str, uirevision: str, height: int = 260, **more: Any) -> go.Figure:
    fig.update_layout(title={"text": title, "font": {"size": 14}}, uirevision=uirevision, height=height,
                      template="plotly_white", margin={"l": 10, "r": 10, "t": 40, "b": 10},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.15, "xanchor": "left", "x": 0,
                              "font": {"size": 11}},
                      **more)
    return fig


def _time_axis(fig: go.Figure) -> go.Figure:
    fig.update_xaxes(tickformat="%H:%M:%S")
    return fig


def _empty(fig: go.Figure, text: str = "no data yet") -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       font={"color": GREY, "size": 13})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _times(points: Sequence[HistoryPoint] | Sequence[AdaptivePoint]) -> list[datetime]:
    return [datetime.fromtimestamp(p.t) for p in points]


def tokens_figure(points: Points, dimension: str = "msgs", capacity: float | None = None,
                  title: str = "tokens", uirevision: str = "tokens") -> go.Figure:
    """The bucket balance over time; below zero (debt) in red, filled down to the zero line."""
    fig = go.Figure()
    pts = list(points)
    tokens = [p.tokensMsgs if dimension == "msgs" else p.tokensBytes for p in pts]
    if not any(v is not None for v in tokens):
        return _layout(_empty(fig, "unlimited: no bucket"), title, uirevision)
    x = _times(pts)
    fig.add_trace(go.Scatter(x=x, y=tokens, name="tokens", mode="lines", line={"color": BLUE, "width": 2}))
    debt = [None if v is None else min(v, 0.0) for v in tokens]
    fig.add_trace(go.Scatter(x=x, y=debt, name="debt (below zero)", mode="lines", fill="tozeroy",
                             fillcolor=DEBT_COLOR, line={"color": RED, "width": 1}))
    if capacity is not None and capacity > 0:
        fig.add_trace(go.Scatter(x=[x[0], x[-1]], y=[capacity, capacity], name="capacity", mode="lines",
                                 line={"color": GREY, "dash": "dot", "width": 1}))
    fig.add_hline(y=0, line={"color": "black", "width": 1.5})
    return _layout(_time_axis(fig), title, uirevision, height=280, yaxis_title=f"{dimension} tokens")


def rate_vs_limit_figure(points: Points, limit_per_s: float | None, dimension: str = "msgs",
                         title: str = "rate vs limit", uirevision: str = "rate") -> go.Figure:
    fig = go.Figure()
    pts = list(points)
    if not pts:
        return _layout(_empty(fig), title, uirevision)
    x = _times(pts)
    admitted = [p.admittedMsgsPerSecond if dimension == "msgs" else p.admittedBytesPerSecond for p in pts]
    fig.add_trace(go.Scatter(x=x, y=admitted, name=f"admitted {dimension}/s", mode="lines",
                             line={"color": GREEN, "width": 2}))
    if limit_per_s is not None:
        fig.add_trace(go.Scatter(x=[x[0], x[-1]], y=[limit_per_s, limit_per_s], name="limit", mode="lines",
                                 line={"color": RED, "dash": "dash", "width": 1.5}))
    else:
        fig.add_annotation(text="limit: unlimited", showarrow=False, xref="paper", yref="paper", x=1, y=1,
                           xanchor="right", yanchor="top", font={"color": GREY, "size": 11})
    return _layout(_time_axis(fig), title, uirevision, height=280, yaxis_title=f"{dimension}/s",
                   yaxis_rangemode="tozero")


def throttled_figure(points: Points, title: str = "throttled", uirevision: str = "throttled") -> go.Figure:
    fig = go.Figure()
    pts = list(points)
    if not pts:
        return _layout(_empty(fig), title, uirevision)
    fig.add_trace(go.Bar(x=_times(pts), y=[p.throttledPerSecond for p in pts], name="throttled per second",
                         marker_color=ORANGE))
    return _layout(_time_axis(fig), title, uirevision, height=280, yaxis_title="throttles/s", showlegend=False,
                   yaxis_rangemode="tozero")


def throttle_time_figure(series: Sequence[HistorySeries], labels: Sequence[str] | None = None,
                         title: str = "throttle time per second", uirevision: str = "throttle-time") -> go.Figure:
    """One line per limiter: producer-seconds spent throttled per second (2.0 = two producers held all along)."""
    fig = go.Figure()
    for i, s in enumerate(series):
        name = labels[i] if labels else f"{s.level} {s.name}"
        fig.add_trace(go.Scatter(x=_times(s.points), y=[p.throttleSecondsPerSecond for p in s.points],
                                 name=name, mode="lines"))
    if not series:
        _empty(fig, "nothing throttled")
    return _layout(_time_axis(fig), title, uirevision, height=300, yaxis_title="throttled s / s",
                   yaxis_rangemode="tozero")


def admitted_vs_limit_figure(rows: Sequence[dict[str, Any]], title: str = "admitted vs limit (msgs/s)",
                             uirevision: str = "admitted-limit") -> go.Figure:
    fig = go.Figure()
    if not rows:
        return _layout(_empty(fig, "no limited target yet"), title, uirevision)
    names = [r["target"] for r in rows]
    fig.add_trace(go.Bar(x=names, y=[r["admitted msgs/s"] for r in rows], name="admitted", marker_color=GREEN))
    fig.add_trace(go.Bar(x=names, y=[r["limit msgs/s"] for r in rows], name="limit", marker_color=GREY))
    return _layout(fig, title, uirevision, height=300, barmode="group")


def top_throttled_figure(rows: Sequence[dict[str, Any]], title: str = "most throttled targets",
                         uirevision: str = "top-throttled") -> go.Figure:
    fig = go.Figure()
    if not rows:
        return _layout(_empty(fig, "nothing throttled"), title, uirevision)
    fig.add_trace(go.Bar(y=[r["target"] for r in rows], x=[r["throttle s/s"] for r in rows], orientation="h",
                         marker_color=RED, name="throttle s/s"))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, uirevision, height=300, xaxis_title="throttled s / s", showlegend=False)


def queue_figure(rows: Sequence[dict[str, Any]], title: str = "waiting producers",
                 uirevision: str = "queue") -> go.Figure:
    """Producers in queue order (the head, next to resume, on top) and how long each has waited."""
    fig = go.Figure()
    if not rows:
        return _layout(_empty(fig, "nobody waits"), title, uirevision, height=200)
    fig.add_trace(go.Bar(y=[f"{r['position']}. {r['producer']}" for r in rows], x=[r["waiting s"] for r in rows],
                         orientation="h", marker_color=ORANGE, name="waiting s"))
    fig.update_yaxes(autorange="reversed", type="category")
    return _layout(fig, title, uirevision, height=max(200, 40 + 28 * len(rows)), xaxis_title="waiting (s)",
                   showlegend=False)


def shares_figure(shares: dict[str, float], jain_index: float | None, title: str = "share of admitted throughput",
                  uirevision: str = "shares") -> go.Figure:
    """Each producer's percentage of the admitted throughput, against the equal share (dashed)."""
    fig = go.Figure()
    total = sum(shares.values())
    if not shares or total <= 0:
        return _layout(_empty(fig, "nothing admitted yet"), title, uirevision)
    names = list(shares)
    fig.add_trace(go.Bar(y=names, x=[100 * shares[n] / total for n in names], name="share %", orientation="h",
                         marker_color=BLUE))
    fig.add_vline(x=100 / len(names), line={"color": GREY, "dash": "dash"}, annotation_text="equal share",
                  annotation_position="top")
    fig.update_yaxes(autorange="reversed", type="category")
    jain_text = "n/a" if jain_index is None else f"{jain_index:.3f}"
    return _layout(fig, f"{title} (Jain's index {jain_text})", uirevision, height=max(200, 90 + 40 * len(names)),
                   xaxis_title="% of admitted msgs/s", showlegend=False)


def resource_group_figure(rows: Sequence[dict[str, Any]], title: str = "usage, demand and quota",
                          uirevision: str = "rg") -> go.Figure:
    fig = go.Figure()
    if not rows:
        return _layout(_empty(fig, "no participant uses this group"), title, uirevision)
    who = [r["participant"] for r in rows]
    for name, field, color in (("usage", "usage msgs/s", GREEN), ("demand", "demand msgs/s", ORANGE),
                               ("computed quota", "quota msgs/s", BLUE)):
        fig.add_trace(go.Bar(x=who, y=[r[field] for r in rows], name=name, marker_color=color))
    return _layout(fig, title, uirevision, barmode="group", yaxis_title="msgs/s")


def shared_limit_figure(rows: Sequence[dict[str, Any]], limit_per_s: float | str, unit: str = "msgs/s",
                        title: str = "usage vs share", uirevision: str = "shared") -> go.Figure:
    """Per participant (``derive_shared.participant_rows``) its demand, usage and share, and the same summed over
    all of them beside the limit (a dashed line; "unlimited" when there is none): a total bar past the line is
    over-admission, a gap under it with demand above it is quota stranded."""
    fig = go.Figure()
    if not rows:
        return _layout(_empty(fig, "no participant reports this limit"), title, uirevision)
    who = [str(r["participant"]) for r in rows] + ["all participants"]

    def bars(field: str) -> list[float | None]:
        values = [r[field] if isinstance(r[field], int | float) else None for r in rows]
        known = [v for v in values if v is not None]
        return values + [sum(known) if known else None]

    for name, field, color in (("demand", f"demand {unit}", ORANGE), ("usage", f"usage {unit}", GREEN),
                               ("share", f"share {unit}", BLUE)):
        fig.add_trace(go.Bar(y=who, x=bars(field), name=name, marker_color=color, orientation="h"))
    if isinstance(limit_per_s, int | float):
        fig.add_vline(x=limit_per_s, line={"color": RED, "dash": "dash", "width": 1.5},
                      annotation_text=f"limit {limit_per_s:,g} {unit}", annotation_position="top")
    else:
        fig.add_annotation(text="limit: unlimited", showarrow=False, xref="paper", yref="paper", x=1, y=1,
                           xanchor="right", yanchor="bottom", font={"color": GREY, "size": 11})
    fig.update_yaxes(type="category", autorange="reversed")   # participants as listed, all of them last
    return _layout(fig, title, uirevision, height=max(220, 110 + 45 * len(who)), barmode="group",
                   xaxis_title=unit, xaxis_rangemode="tozero")


def offload_figure(points: Points, permits_bytes_per_s: float | None,
                   title: str = "offload bytes/s vs permits", uirevision: str = "offload") -> go.Figure:
    """Read bytes/s against the permits, limited reads per second on the second axis (``derive_participants``'s
    points: the control plane keeps no offload history)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    pts = list(points)
    if not pts:
        return _layout(_empty(fig, "no offload yet"), title, uirevision)
    x = _times(pts)
    fig.add_trace(go.Scatter(x=x, y=[p.admittedBytesPerSecond for p in pts], name="read bytes/s", mode="lines",
                             line={"color": GREEN, "width": 2}), secondary_y=False)
    if permits_bytes_per_s is not None and permits_bytes_per_s > 0:
        fig.add_trace(go.Scatter(x=[x[0], x[-1]], y=[permits_bytes_per_s] * 2, name="permits", mode="lines",
                                 line={"color": RED, "dash": "dash"}), secondary_y=False)
    fig.add_trace(go.Bar(x=x, y=[p.throttledPerSecond for p in pts], name="limited reads/s", opacity=0.5,
                         marker_color=ORANGE), secondary_y=True)
    fig.update_yaxes(title_text="bytes/s", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="limited/s", rangemode="tozero", secondary_y=True, showgrid=False)
    return _layout(_time_axis(fig), title, uirevision, height=300)


def mutation_figure(rows: Sequence[dict[str, Any]], title: str = "mutation quotas per user / client id",
                    uirevision: str = "mutations") -> go.Figure:
    """Tokens (negative = debt, red) and throttle time per (user, client id)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens (below zero: debt)", "throttle time (s)"),
                        horizontal_spacing=0.08)
    if not rows:
        return _layout(_empty(fig, "no mutation quota in use"), title, uirevision)
    who = [f"{r['user']} / {r['client id']}" + (f" @{r['where']}" if r.get("where") else "") for r in rows]
    tokens = [r["tokens"] for r in rows]
    fig.add_trace(go.Bar(x=who, y=tokens, name="tokens", marker_color=[RED if t < 0 else BLUE for t in tokens]),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=who, y=[r["throttle s"] for r in rows], name="throttle s", marker_color=ORANGE),
                  row=1, col=2)
    fig.add_hline(y=0, line={"color": "black", "width": 1}, row=1, col=1)
    fig.update_yaxes(rangemode="tozero", row=1, col=2)
    _layout(fig, title, uirevision, height=320, showlegend=False)
    fig.update_layout(margin={"t": 70})
    return fig


def adaptive_figure(points: Sequence[AdaptivePoint], title: str = "adaptive limit",
                    uirevision: str = "adaptive") -> go.Figure:
    """An adaptive limit over time: the rate it learnt beside its ceiling (dashed), and the sink's answers --
    sends taken and refused per second -- on the same axis (a refusal is what cuts the rate)."""
    fig = go.Figure()
    pts = list(points)
    if not pts:
        return _layout(_empty(fig, "nobody asked for its grants yet"), title, uirevision)
    x = _times(pts)
    fig.add_trace(go.Scatter(x=x, y=[p.ratePerSecond for p in pts], name="learnt rate", mode="lines",
                             line={"color": BLUE, "width": 2, "shape": "hv"}))
    fig.add_trace(go.Scatter(x=x, y=[p.ceilingPerSecond for p in pts], name="ceiling (configured)", mode="lines",
                             line={"color": RED, "dash": "dash", "width": 1.5, "shape": "hv"}))
    fig.add_trace(go.Scatter(x=x, y=[p.okPerSecond for p in pts], name="taken by the sink /s", mode="lines",
                             line={"color": GREEN, "width": 1}))
    fig.add_trace(go.Bar(x=x, y=[p.throttledPerSecond for p in pts], name="refused by the sink /s",
                         marker_color=ORANGE))
    return _layout(_time_axis(fig), title, uirevision, height=280, yaxis_title="msgs/s", yaxis_rangemode="tozero")
