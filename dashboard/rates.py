"""Live rates: every rate of the control plane's history as the rate over a trailing span of several reports.

How and why
-----------
The control plane's history (``/v1/state/history``) holds one point per report interval: per limiter, the rate
each participant's counters grew by between its last two reports, summed. One interval is a short time to
measure a rate over: reports come with jitter (a report 30 % late, the next one early), a slot may get no report
or two, and counters advance in whole batches (a producer that sends 10 messages every 0.1 s moves its counter
by 10 or 20 in a 0.175-s interval: 57 or 114 msgs/s for a steady 100). Drawn point by point, a steady stream
zigzags by tens of percent.

``smoothed`` gives every point of a rate field the rate over the ``span_s`` seconds that end at it: the mean of
the points in the span, each weighted by the time it covers (since the point before it, at most one span) --
the counters' growth over the span divided by its length. ``span_s`` is ``max(MIN_SPAN_S, SPAN_REPORTS x
interval)``: several reports, so the counter steps and the timing jitter average out (a steady 100 msgs/s reads
100 +- 10 %), and short enough that a live change shows within seconds (Prometheus, the other source, takes
``rate()`` over 30 s or more). Token balances are levels, not rates: they are left as they are. ``data.history``
asks for ``span_s`` more history than it shows, so the first point shown has a full span behind it too.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from protocol.state import HistoryPoint, HistoryState

__all__ = ["RATE_FIELDS", "MIN_SPAN_S", "SPAN_REPORTS", "span_s", "smooth_points", "smoothed"]

# the HistoryPoint fields that are rates (the others, token balances and the participant count, are levels)
RATE_FIELDS = ("admittedMsgsPerSecond", "admittedBytesPerSecond", "throttleSecondsPerSecond", "throttledPerSecond")
MIN_SPAN_S = 3.0
SPAN_REPORTS = 4


def span_s(interval_s: float) -> float:
    """The span live rates are measured over, for reports every ``interval_s`` seconds."""
    return max(MIN_SPAN_S, SPAN_REPORTS * interval_s)


def _over_span(points: Sequence[HistoryPoint], field: str, interval_s: float, span: float) -> list[float | None]:
    """Per point, the rate ``field`` over the span ending at it (None while no point in the span has a value)."""
    window: deque[tuple[float, float, float]] = deque()   # (t, value x weight, weight) of the points in the span
    total = weight = 0.0
    before: float | None = None
    out: list[float | None] = []
    for p in points:
        covers = interval_s if before is None else min(max(p.t - before, 0.0), span)
        before = p.t
        value = getattr(p, field)   # one of RATE_FIELDS: a name HistoryPoint does not have raises, not skips
        if value is not None and math.isfinite(value) and covers > 0:
            window.append((p.t, value * covers, covers))
            total, weight = total + value * covers, weight + covers
        while window and window[0][0] <= p.t - span:
            _, vw, w = window.popleft()
            total, weight = total - vw, weight - w
        out.append(total / weight if window and weight > 0 else None)
    return out


def smooth_points(points: Sequence[HistoryPoint], interval_s: float, span: float | None = None) -> list[HistoryPoint]:
    """``points`` (oldest first) with each rate field the rate over the span ending at that point (None while no
    point in the span has a value); the other fields as they were. The points given are not changed."""
    span = span_s(interval_s) if span is None else span
    rates = {field: _over_span(points, field, interval_s, span) for field in RATE_FIELDS}
    return [p.model_copy(update={field: values[i] for field, values in rates.items()}) for i, p in enumerate(points)]


def smoothed(history: HistoryState, seconds: float | None = None) -> HistoryState:
    """``history`` with every series' rates over the trailing span (see the module essay); with ``seconds``, only
    the points of the last ``seconds`` (before the newest point of any series) are kept, the span before them
    having been read for their rates."""
    series = [s.model_copy(update={"points": smooth_points(s.points, history.intervalSeconds)})
              for s in history.series]
    if seconds is not None:
        newest = max((p.t for s in series for p in s.points), default=0.0)
        series = [s.model_copy(update={"points": [p for p in s.points if p.t > newest - seconds]}) for s in series]
        series = [s for s in series if s.points]
    return history.model_copy(update={"series": series})
