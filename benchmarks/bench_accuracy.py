"""Achieved rate against the limit, and how fast a live limit change takes effect, on the real clock.

4 producers of one topic (``PublishLimits`` on ``SystemClock``), each a thread looping ``acquire()`` as fast as it
can, against a topic limit of 1,000 msgs/s. Every admitted message is time-stamped (``time.monotonic_ns``, the
clock the limiter reads).

Achieved rate: the bucket starts full (capacity = 1 s of rate), so the first second would read ~2x the limit.
The figure counts what was admitted over the window *after* a warm-up that drains that initial burst.

Live change: while saturated at 1,000 msgs/s, ``set_topic_policy`` raises the limit to 2,000, later lowers it to
500. The figure is the time from the call until the limit has taken effect: the first instant t such that the
100 ms window starting at t achieves the new limit within 5 %, and so does everything from t to the end of the
observation (so a lucky window does not count). A window *ending* at t would add ~100 ms of the measurement's own
lag to any limiter, however fast. The limiter admits in batches of one 16 ms resolution tick, so figures below
~16 ms mean "at once".
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any

from limiter import Level, PublishLimits, Rate, SystemClock

from .common import row, saturating, stamp_admitted

SECTION = "accuracy"
TOPIC = "bench/accuracy/topic"
PRODUCERS = 4
LIMIT = 1000
WINDOW_NS = 100_000_000
TOLERANCE = 0.05
MS = 1_000_000


def _count(stamps: list[int], start_ns: int, end_ns: int) -> int:
    return bisect_left(stamps, end_ns) - bisect_left(stamps, start_ns)


def settle_ms(stamps: list[int], change_ns: int, end_ns: int, limit: float) -> float:
    """ms from ``change_ns`` to the first instant t from which the next 100 ms, and everything from t to
    ``end_ns``, achieve ``limit`` within 5 % (nan if no such t)."""
    target = limit * WINDOW_NS / 1e9
    t = change_ns
    while t + WINDOW_NS <= end_ns:
        window = _count(stamps, t, t + WINDOW_NS)
        rest = _count(stamps, t, end_ns) / ((end_ns - t) / 1e9)
        if abs(window - target) <= TOLERANCE * target and abs(rest - limit) <= TOLERANCE * limit:
            return (t - change_ns) / MS
        t += MS
    return float("nan")


def run(quick: bool = False) -> list[dict[str, Any]]:
    warmup_s, window_s, hold_s = (0.3, 1.0, 0.6) if quick else (1.0, 10.0, 1.0)
    limits = PublishLimits(clock=SystemClock())
    limits.set_topic_policy(Level.TOPIC, TOPIC, Rate(msgs=LIMIT))
    producers = [limits.producer(TOPIC, name=f"p{i}") for i in range(PRODUCERS)]
    start_ns = time.monotonic_ns()
    # limits.close() on leaving resumes anyone still paused, so every thread sees the stop flag.
    with saturating([stamp_admitted(p.acquire) for p in producers], limits.close) as outs:
        time.sleep(warmup_s)
        t0 = time.monotonic_ns()
        time.sleep(window_s)
        t1 = time.monotonic_ns()
        changes = []
        for new in (2 * LIMIT, LIMIT // 2):
            at = time.monotonic_ns()
            limits.set_topic_policy(Level.TOPIC, TOPIC, Rate(msgs=new))
            changes.append((new, at))
            time.sleep(hold_s)
        end_ns = time.monotonic_ns()
    stamps = sorted(s for out in outs for s in out)

    achieved = _count(stamps, t0, t1) / ((t1 - t0) / 1e9)
    with_burst = _count(stamps, start_ns, t1) / ((t1 - start_ns) / 1e9)
    error = (achieved / LIMIT - 1) * 100
    rows = [row(SECTION, f"achieved rate, {PRODUCERS} saturating producers, topic limit {LIMIT:,} msgs/s",
                achieved, "msgs/s", f"{LIMIT:,} +/- 1 %", abs(error) <= 1.0,
                f"{error:+.2f} % over {window_s:g} s after a {warmup_s:g} s warm-up that drains the initial full "
                f"bucket; counted from the start instead: {with_burst:,.0f} msgs/s")]
    bounds = [c[1] for c in changes[1:]] + [end_ns]
    for (new, at), until in zip(changes, bounds, strict=True):
        old = LIMIT if new == 2 * LIMIT else 2 * LIMIT
        ms = settle_ms(stamps, at, until, new)
        span_s = (until - at) / 1e9
        first = _count(stamps, at, at + WINDOW_NS) / (WINDOW_NS / 1e9)
        after = _count(stamps, at, until) / span_s
        settled = "never settled" if ms != ms else "settled"
        rows.append(row(SECTION, f"live change {old:,} -> {new:,} msgs/s: time to take effect", ms, "ms",
                        note=f"{settled}: the 100 ms from then, and all the rest, within 5 % of the new limit; "
                             f"first 100 ms after the change {first:,.0f} msgs/s, the {span_s:.1f} s after it "
                             f"{after:,.0f} msgs/s"))
    return rows
