"""What each participant admitted per limiter over the last few seconds, read from the counters of two reports.

Why
---
A participant's reported usage of a shared limit is what it admitted over its last report interval. That is what
the fair split wants (the newest reading), but on a dashboard it swings with the sends' granularity: producers
that send 8 messages at a time at 10 msgs/s each, reporting every 0.5 s, admit 8 or 16 messages in an interval and
read 16 or 32 msgs/s, so two of them, steadily under a limit of 20, summed to 32 -- "over the limit by 12" -- in
one refresh and to 16 -- "stranded" -- in the next, while the limiter's counters read a steady 18 a second.

How
---
Each live participant keeps, beside its latest report, the counters of two earlier ones of its own (marks): ``base``
and ``mid``. A report that comes ``SPAN_S`` or more after ``mid`` makes ``mid`` the new ``base`` and its own mark
the new ``mid``, so the span from ``base`` to the latest report stays between ``SPAN_S`` and about twice it (plus an
interval), whatever the report interval: long enough that a send's size moves the figure little (a send of 10
messages, 2/s at most), short enough that a changed limit shows within seconds. What a limiter admitted per second
over that span is the difference of its cumulative counters (``admitted_msgs_total``, ``admitted_bytes_total``) over
the difference of their ``sent_at`` -- both from the participant's own clock. Worked example: reports every 0.5 s,
``SPAN_S`` = 5; at t = 20.0 ``base`` is the report of 10.0 and ``mid`` that of 15.0; the report of 20.0 is 5 s after
``mid``, so ``base`` becomes 15.0's and ``mid`` 20.0's; at 24.0 the span is 24.0 - 15.0 = 9 s, and a counter that
went from 1,200 to 1,362 reads 18.0/s.

Consistency rules: nothing here changes a grant, a share or a usage map -- those read the reported usage. A
limiter the base does not count yet (made after it: a participant's first report often counts none) or counted
more (replaced since) is read from ``mid``; a span shorter than ``MIN_SPAN_S`` (a participant's first second)
gives no figure, and the reader falls back to the reported usage. Costs a dict of the counters every ``SPAN_S``
a participant (a mark keeps its report's counters, not the report); the rates are computed only when a view
asks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from protocol import Report

__all__ = ["SPAN_S", "MIN_SPAN_S", "Mark", "Span", "mark", "advance", "admitted_per_s"]

SPAN_S = 5.0        # the shortest span after the first seconds: a send of 10 moves the rate by 2/s at most
MIN_SPAN_S = 1.0    # below this, the reported usage is as good


Totals = dict[tuple[str, str, str], tuple[float, float]]


class Mark(NamedTuple):
    """What an earlier report said of its limiters: when it was sent and their cumulative (msgs, bytes)."""

    sent_at: float
    totals: Totals


class Span(NamedTuple):
    base: Mark
    mid: Mark


def _totals(report: Report) -> Totals:
    return {(c.level, c.kind, c.name): (c.admitted_msgs_total, c.admitted_bytes_total) for c in report.counters}


def mark(report: Report) -> Mark:
    return Mark(report.sent_at, _totals(report))


def advance(span: Span | None, report: Report) -> Span:
    """The span after ``report`` was accepted (``span``: the participant's before it, None for its first). Only
    the counters are kept of a report that becomes a mark, once every ``SPAN_S``: not the report."""
    if span is None:
        first = mark(report)
        return Span(first, first)
    if report.sent_at - span.mid.sent_at >= SPAN_S:
        return Span(span.mid, mark(report))
    return span


def admitted_per_s(span: Span, latest: Report,
                   keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], tuple[float, float]]:
    """Per limiter (level, kind, name) of ``keys``: (msgs, bytes) admitted per second up to ``latest``, from
    ``span.base`` -- or from ``span.mid`` where the base does not count that limiter yet (a limiter made after
    it) or counted more (it was replaced) -- over at least ``MIN_SPAN_S``. A limiter neither tells is left out."""
    now = _totals(latest)
    starts = [(latest.sent_at - m.sent_at, m.totals) for m in (span.base, span.mid)
              if latest.sent_at - m.sent_at >= MIN_SPAN_S]
    out = {}
    for key in keys:
        a = now.get(key)
        if a is None:
            continue
        for dt, then in starts:
            b = then.get(key)
            if b is not None and a[0] >= b[0] and a[1] >= b[1]:
                out[key] = ((a[0] - b[0]) / dt, (a[1] - b[1]) / dt)
                break
    return out
