"""Fairness: 10 equal saturating producers on one publish limiter, beside a naive limiter, on the real clock.

Ours: one ``PublishRateLimiter`` at 1,000 msgs/s and 10 ``Producer``s bound to it, each a thread looping
``producer.acquire()``. Naive: a ``threading.Lock`` around a token count and a time check at the same rate, each
thread looping ``try_acquire()`` and sleeping 1 ms after a refusal (sleep-retry, as one would write it).
Each runs for the window after a warm-up (so the initial full bucket does not count); Jain's index
J = (sum x)^2 / (n * sum x^2) over the messages each producer got (1 = perfectly equal, 1/n = one got all).
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from limiter import Producer, PublishRateLimiter, Rate, SystemClock

from .common import NaiveLimiter, StampLoop, jain_index, row, saturating, stamp_admitted

SECTION = "fairness"
PRODUCERS = 10
LIMIT = 1000
RETRY_S = 0.001


def _naive_loop(limiter: NaiveLimiter) -> StampLoop:
    def loop(stop: list[bool], out: array) -> None:
        try_acquire, stamp, append, sleep = limiter.try_acquire, time.monotonic_ns, out.append, time.sleep
        while not stop[0]:
            if try_acquire():
                append(stamp())
            else:
                sleep(RETRY_S)
    return loop


def _measure(loops: list[StampLoop], warmup_s: float, window_s: float,
             release: Callable[[], None]) -> tuple[list[int], float]:
    """Per-producer admitted counts over the window, and the window's length in seconds."""
    with saturating(loops, release) as outs:
        time.sleep(warmup_s)
        t0 = time.monotonic_ns()
        time.sleep(window_s)
        t1 = time.monotonic_ns()
    counts = [bisect_left(out, t1) - bisect_left(out, t0) for out in outs]  # each thread's stamps are in order
    return counts, (t1 - t0) / 1e9


def run(quick: bool = False) -> list[dict[str, Any]]:
    warmup_s, window_s = (0.3, 1.0) if quick else (1.0, 10.0)
    clock = SystemClock()
    limiter = PublishRateLimiter(Rate(msgs=LIMIT), name="bench/fairness/topic", clock=clock)
    producers = [Producer(f"p{i}", [limiter], clock=clock) for i in range(PRODUCERS)]
    ours, ours_s = _measure([stamp_admitted(p.acquire) for p in producers], warmup_s, window_s, limiter.close)
    naive_limiter = NaiveLimiter(LIMIT)
    naive, naive_s = _measure([_naive_loop(naive_limiter)] * PRODUCERS, warmup_s, window_s, lambda: None)

    rows = []
    for label, counts, span_s, goal in (("PublishRateLimiter + Producer.acquire()", ours, ours_s, ">= 0.99"),
                                        ("naive Lock limiter, 1 ms sleep-retry", naive, naive_s, "")):
        j = jain_index(counts)
        rate = sum(counts) / span_s
        rows.append(row(SECTION, f"Jain's index, {PRODUCERS} saturating producers, {label}", j, "J", goal,
                        (j >= 0.99) if goal else None,
                        f"aggregate {rate:,.0f} msgs/s against {LIMIT:,} ({(rate / LIMIT - 1) * 100:+.2f} %); "
                        f"per producer {min(counts)}..{max(counts)} msgs in {span_s:.1f} s"))
    return rows
