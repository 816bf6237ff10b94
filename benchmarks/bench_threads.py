"""Threads on one bucket: aggregate throughput, and what a shared limiter does to an unrelated thread's latency.

Throughput: 4 threads call ``consume_and_check(1)`` on one shared ``AsyncTokenBucket`` (non-binding limit) as
fast as they can; their aggregate ops/s against 1 thread doing the same. Under the GIL 4 threads cannot beat 1;
the goal is that sharing costs little (>= 0.8x).

Latency (Pulsar #21442: a synchronized limiter raised the p99 latency of unrelated topics): an unrelated thread
loops over a tiny fixed piece of work and records each iteration's duration (``perf_counter_ns``) while 4
hammer threads run. The hammers call, in turn, (a) a private no-op object each (the GIL's own effect), (b) one
shared ``AsyncTokenBucket``, (c) one shared naive limiter (a ``threading.Lock`` around a counter and a time
check). The figure is the rise of the unrelated thread's p99 over (a). Runs are interleaved (the order rotates)
and each figure is the median over the runs.
"""

from __future__ import annotations

import threading
import time
from array import array
from typing import Any

from limiter import AsyncTokenBucket, SystemClock

from .common import NaiveLimiter, median, percentile, row

SECTION = "threads"
HUGE = 10**12
HAMMERS = 4
CHUNK = 256


class PrivateNoop:
    def consume_and_check(self, n=1):
        return True


def _hammer(fn, stop: list[bool], go: threading.Event, counts: list[int], i: int) -> None:
    go.wait()
    n = 0
    while not stop[0]:
        for _ in range(CHUNK):
            fn(1)
        n += CHUNK
    counts[i] = n


def _throughput(kind: str, threads: int, duration_s: float) -> float:
    if kind == "bucket":
        fn = AsyncTokenBucket(rate=HUGE, capacity=HUGE, clock=SystemClock()).consume_and_check
    else:
        fn = NaiveLimiter(rate=HUGE).try_acquire
    stop, go, counts = [False], threading.Event(), [0] * threads
    workers = [threading.Thread(target=_hammer, args=(fn, stop, go, counts, i), daemon=True)
               for i in range(threads)]
    for w in workers:
        w.start()
    start = time.perf_counter()
    go.set()
    time.sleep(duration_s)
    stop[0] = True
    elapsed = time.perf_counter() - start
    for w in workers:
        w.join()
    return sum(counts) / elapsed


def _victim(stop: list[bool], go: threading.Event, out: array) -> None:
    go.wait()
    clock, append = time.perf_counter_ns, out.append
    prev = clock()
    while not stop[0]:
        x = 0
        for k in range(16):  # the tiny fixed piece of work
            x += k
        now = clock()
        append(now - prev)
        prev = now


def _latency(mode: str, duration_s: float) -> dict[str, float]:
    """Percentiles (ns) of the unrelated thread's loop iterations while 4 hammers run in ``mode``."""
    if mode == "alone":
        fns = []
    elif mode == "private":
        fns = [PrivateNoop().consume_and_check for _ in range(HAMMERS)]
    elif mode == "shared bucket":
        bucket = AsyncTokenBucket(rate=HUGE, capacity=HUGE, clock=SystemClock())
        fns = [bucket.consume_and_check] * HAMMERS
    elif mode == "shared naive":
        naive = NaiveLimiter(rate=HUGE)
        fns = [naive.try_acquire] * HAMMERS
    else:
        raise ValueError(mode)
    stop, go, counts = [False], threading.Event(), [0] * len(fns)
    samples = array("q")
    threads = [threading.Thread(target=_hammer, args=(fn, stop, go, counts, i), daemon=True)
               for i, fn in enumerate(fns)]
    threads.append(threading.Thread(target=_victim, args=(stop, go, samples), daemon=True))
    for t in threads:
        t.start()
    go.set()
    time.sleep(duration_s)
    stop[0] = True
    for t in threads:
        t.join()
    values = sorted(samples[len(samples) // 10:])  # the first tenth is warm-up
    return {"p50": percentile(values, 50), "p99": percentile(values, 99), "p99.9": percentile(values, 99.9),
            "n": float(len(values)), "hammer_ops": sum(counts) / duration_s}


def run(quick: bool = False) -> list[dict[str, Any]]:
    runs, duration_s = (1, 0.1) if quick else (5, 0.3)
    latency_runs, latency_s = (1, 0.2) if quick else (25, 0.3)
    rows: list[dict[str, Any]] = []

    for kind, label, goal in (("bucket", "one shared AsyncTokenBucket", ">= 0.8x"),
                              ("naive", "one shared naive Lock limiter", "")):
        one, four = [], []
        for _ in range(runs):
            one.append(_throughput(kind, 1, duration_s))
            four.append(_throughput(kind, HAMMERS, duration_s))
        one_ops, four_ops = median(one), median(four)
        ratio = four_ops / one_ops
        rows.append(row(SECTION, f"{HAMMERS} threads on {label} vs 1 thread (aggregate ops/s)", ratio,
                        "x 1 thread", goal, (ratio >= 0.8) if goal else None,
                        f"1 thread {one_ops:,.0f} ops/s, {HAMMERS} threads {four_ops:,.0f} ops/s; median of {runs}"))

    modes = ["private", "shared bucket", "shared naive"]
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(latency_runs):
        for mode in modes[r % len(modes):] + modes[: r % len(modes)]:
            results[mode].append(_latency(mode, latency_s))
    alone = _latency("alone", latency_s)
    p99 = {m: median(res["p99"] for res in results[m]) for m in modes}
    rows.append(row(SECTION, f"unrelated thread's loop p99, {HAMMERS} threads on private no-op objects",
                    p99["private"] / 1000, "us",
                    note=f"the reference (the GIL's own effect); thread alone: p99 {alone['p99'] / 1000:.2f} us; "
                         f"median of {latency_runs} interleaved runs of {latency_s:g} s"))
    for mode, label, goal in (("shared bucket", "one shared AsyncTokenBucket", "<= 10 %"),
                              ("shared naive", "one shared naive Lock limiter", "")):
        # paired with the private run of the same round, so a slow spell of the machine cancels out
        rises = sorted((res["p99"] / base["p99"] - 1) * 100
                       for res, base in zip(results[mode], results["private"], strict=True))
        rise = median(rises)
        p999 = median(res["p99.9"] for res in results[mode]) / 1000
        calls = median(res["hammer_ops"] for res in results[mode])
        rows.append(row(SECTION, f"unrelated thread's p99 rise, {HAMMERS} threads on {label}", rise,
                        "% vs private", goal, (rise <= 10.0) if goal else None,
                        f"median of paired runs (range {rises[0]:+.0f}..{rises[-1]:+.0f} %); p99 "
                        f"{p99[mode] / 1000:.2f} us; p99.9 {p999:.1f} us vs "
                        f"{median(res['p99.9'] for res in results['private']) / 1000:.1f} us; "
                        f"hammers made {calls:,.0f} calls/s"))
    return rows
