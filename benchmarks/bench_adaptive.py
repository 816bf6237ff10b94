"""Adaptive limits against a sink whose capacity the job does not know, side by side with no adaptation and with
per-task AIMD, in one run on ``local[2]``.

A real HTTP server on loopback (``shared/sink_server.py``) takes 700 records/s (a token bucket holding 0.2 s of it)
and answers 429 with a Retry-After beyond it; a Structured Streaming job (Spark's ``rate-micro-batch``, 2 tasks,
2,000 rows a micro-batch -- ``--rows-per-batch`` sets it --, more demand than any limit) sends to it through a
shared limit configured at 2,000/s, in requests of 20 records (``shared/adaptive_kinds.py``). Mid-run the sink's
capacity becomes 1,200/s, then 400/s -- after 20, 23 or 26 s at 700/s in the three runs of each kind
(``SHIFTS_S``: the change comes at another point of the rate's probe cycle in each). Kinds: ``ours`` (the limit
is ``adaptive``; every task reports each answer), ``none`` (the same limit, not adaptive), ``alone`` (per-task
AIMD: each Python worker adapts its own part of the limit to its own answers). A refused request is not sent
again. Two sinks (``SINKS``): one whose Retry-After is whole seconds only, as HTTP's header is (each refusal
pauses every sender of an adaptive limit for a second at least), and one that also sends its exact wait in
``retry-after-ms``, as Azure's services do (``none`` is run on the first only: it pauses for neither). Figures,
from the server's own record of every answer:

- seconds until the sink takes >= 0.9 of its capacity over 3 seconds in a row (refusing < 5 %; goal <= 10),
  then what it takes over its capacity (goal >= 0.9) and the share of records it refuses from then on
  (goal < 1 %), and where the rest went: the shares of that time in which the sink was not asked, paused by a
  refusal's Retry-After or between two of Spark's micro-batches (``silent_shares``);
- seconds to follow each capacity change (the same test at the new capacity; goal <= 10 each);
- over the whole run, ours against the other two: it must refuse less and deliver more than both. This sink takes
  its capacity whatever it refuses, so without adaptation it is full whenever the job sends and takes every
  change of capacity at once; what that kind loses is Spark's gaps between micro-batches, a larger share of its
  time than of ours (its micro-batches are sent at the ceiling). No adaptation is run on the first sink only and
  compared with ours on both: it reads neither header.

The control plane and the Spark session are those of ``bench_shared`` (``Bench``: report interval 1 s, the
library shipped to the executors, a warm-up run first).
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import row
from .shared import jobs
from .shared.adaptive_kinds import KINDS, sender_fn
from .shared.sink_server import SinkServer
from .shared.windows import combined

SECTION = "adaptive"
CEILING = 2000.0
# (capacity per second, seconds): each phase long enough that a follow-up time past the goal reads as a number (the
# 3-s hold must fit in the phase: a 12-s phase read "inf" for anything past 9 s)
PHASES = ((700.0, 20.0), (1200.0, 16.0), (400.0, 16.0))
QUICK_PHASES = ((700.0, 12.0), (1200.0, 10.0), (400.0, 10.0))
SINKS = {"Retry-After": False, "+ retry-after-ms": True}   # name -> the sink sends retry-after-ms too
HELD_S = 3   # seconds in a row a capacity must be held to count as reached
# a silence between two answers longer than this is time the sink was not asked: after a refusal, the pause its
# Retry-After asked for; else Spark's gap between two micro-batches (two tasks sending 20-record requests at 700/s
# are answered about 30 ms apart, 60 ms at most)
SILENT_S = 0.12
# runs of each kind on each sink: one run's figures swing with Spark's micro-batches (the same code followed the
# whole-second sink's 1,200 -> 400 in 4 s and in 12 s, and took 0.81-0.92 of 700/s, in runs one after another)
REPEATS = 3
# the first phase of repeat i is longer by SHIFTS_S[i % 3] seconds (whole: the figures count whole seconds). At an
# unchanged capacity the rate probes the sink every 7-9 s, and where in that cycle the capacity changes decides how
# soon the change is found: runs of one length met it at about the same point of the cycle, and their figures moved
# together (one code read 2, 2, 2 s in three runs, another 13 and 13 s in two)
SHIFTS_S = (0, 3, 6)


def phases_of_repeat(phases: tuple[tuple[float, float], ...], i: int) -> tuple[tuple[float, float], ...]:
    """Repeat ``i``'s phases: the first longer by ``SHIFTS_S[i % 3]`` seconds, the others as they are."""
    (capacity, length), *rest = phases
    return ((capacity, length + SHIFTS_S[i % len(SHIFTS_S)]), *rest)


def per_second(answers: list[tuple[float, int, bool]], t0: float, seconds: int) -> tuple[list[int], list[int]]:
    """Records taken and refused in each second from ``t0``."""
    taken, refused = [0] * seconds, [0] * seconds
    for t, n, ok in answers:
        s = math.floor(t - t0)   # (int() would fold the second before t0 into second 0)
        if 0 <= s < seconds:
            (taken if ok else refused)[s] += n
    return taken, refused


def reached_s(taken: list[int], refused: list[int], capacity: float) -> float:
    """Seconds until ``capacity`` is held: HELD_S seconds in a row that took >= 0.9 of it and refused < 5 % of
    what came (one second alone swings with Spark's micro-batches); inf if never."""
    for s in range(len(taken) - HELD_S + 1):
        t, r = sum(taken[s:s + HELD_S]), sum(refused[s:s + HELD_S])
        if t >= 0.9 * capacity * HELD_S and r <= 0.05 * (t + r):
            return float(s)
    return float("inf")


def silent_shares(answers: list[tuple[float, int, bool]], start: float, end: float) -> tuple[float, float]:
    """(paused, idle): the shares of ``[start, end)`` in which the sink was not asked, for longer than
    ``SILENT_S`` at a time -- after a refusal (the senders paused for its Retry-After), or after an answer that
    took its records (no sender had anything to send: Spark's gap between two micro-batches). What the sink could
    take in them is lost, but for what its bucket banks: they bound the taken share from above. (Read so for a
    limit that pauses every sender at a refusal: without that, a silence after a refusal is as often a gap.)"""
    times = sorted((t, ok) for t, _, ok in answers if start <= t < end)
    paused = idle = 0.0
    for (t, ok), (t_next, _) in zip(times, times[1:], strict=False):
        if t_next - t > SILENT_S:
            if ok:
                idle += t_next - t
            else:
                paused += t_next - t
    span = max(end - start, 1e-9)
    return paused / span, idle / span


def figures(answers: list[tuple[float, int, bool]], t0: float, phases: tuple[tuple[float, float], ...]
            ) -> dict[str, float]:
    out: dict[str, float] = {}
    start = 0
    for i, (capacity, length) in enumerate(phases):
        taken, refused = per_second(answers, t0 + start, int(length))
        reach = reached_s(taken, refused, capacity)
        out[f"reach_{i}"] = reach
        if i == 0:
            after = slice(int(reach), None) if reach != float("inf") else slice(len(taken) // 2, None)
            t_after, r_after = sum(taken[after]), sum(refused[after])
            out["after_mean"] = t_after / (capacity * max(1, len(taken[after])))
            out["after_refused"] = r_after / max(1, t_after + r_after)
            after_s = (after.start or 0) + start
            out["after_paused"], out["after_idle"] = silent_shares(answers, t0 + after_s, t0 + start + len(taken))
        start += int(length)
    taken, refused = per_second(answers, t0, start)
    out["taken"], out["refused_share"] = float(sum(taken)), sum(refused) / max(1, sum(taken) + sum(refused))
    return out


def _run_kind(bench: Any, kind: str, phases: tuple[tuple[float, float], ...], retry_after_ms: bool = False,
              rows_per_batch: int = int(CEILING)) -> dict[str, float]:
    bench.runs += 1
    topic = f"ad{bench.runs}/ns/api"
    bench._ok(bench.admin.post(f"/admin/v2/persistent/{topic}/publishRate", json={
        "publishThrottlingRateInMsg": CEILING, "adaptive": kind == "ours"}))
    sink = SinkServer(phases[0][0], retry_after_ms=retry_after_ms).start()
    try:
        started: dict[str, float] = {}

        def change(t0: float) -> None:   # (on a thread, from when the query started)
            started["t0"] = at = t0
            for i in range(1, len(phases)):
                at += phases[i - 1][1]
                time.sleep(max(0.0, at - time.time()))
                sink.set_capacity(phases[i][0])

        total = sum(length for _, length in phases)
        fn = sender_fn(kind, topic, sink.url, ceiling_per_s=CEILING, tasks=2, key=f"alone{bench.runs}")
        jobs.stream(bench.spark, fn, 2, rows_per_batch, total, change)
        answers = list(sink.answers)
        taken, refused = per_second(answers, started["t0"], int(total))
        print(f"  adaptive [{kind}] taken per second: {taken}\n  refused per second: {refused}", file=sys.stderr,
              flush=True)
        return figures(answers, started["t0"], phases)
    finally:
        sink.close()


def median_of(runs: list[dict[str, float]]) -> dict[str, Any]:
    """One kind's figures over its runs: the median of each (``combined``); ``spread`` keeps every run's value,
    sorted."""
    return {**combined(runs), "spread": {key: sorted(r[key] for r in runs) for key in runs[0]}}


def _spread(r: dict[str, Any], key: str, scale: float = 1.0) -> str:
    """The note of a median: every run's value (``inf``: not within the phase)."""
    values = r.get("spread", {}).get(key, [])
    if len(values) < 2:
        return ""
    return f"the median of {len(values)} runs: " + ", ".join(f"{v * scale:.3g}" for v in values)


def rows_for(results: dict[str, dict[str, Any]], phases: tuple[tuple[float, float], ...], sink: str = "Retry-After",
             none: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rows of one sink's runs (``results``: kind -> figures, or their ``median_of``); ``none``: no
    adaptation's figures from the other sink's runs, compared with ours when ``results`` has none of its own (that
    kind reads neither header, so its runs serve both sinks)."""
    c0, c1, c2 = (int(c) for c, _ in phases)
    out = []
    for kind in KINDS:
        r = results.get(kind)
        if r is None:
            continue
        ours = kind == "ours"
        name = f"sink of {c0:,}/s ({sink}), limit {int(CEILING):,} [{kind}]"
        out += [
            row(SECTION, f"{name}: seconds to take >= 0.9 of the capacity", r["reach_0"], "s",
                "<= 10" if ours else "", r["reach_0"] <= 10 if ours else None, _spread(r, "reach_0")),
            row(SECTION, f"{name}: taken / capacity after that", r["after_mean"], "x",
                ">= 0.9" if ours else "", r["after_mean"] >= 0.9 if ours else None, _spread(r, "after_mean")),
            row(SECTION, f"{name}: refused after that", 100 * r["after_refused"], "%",
                "< 1" if ours else "", r["after_refused"] < 0.01 if ours else None,
                _spread(r, "after_refused", 100)),
        ]
        if ours:
            # (where ours' time after convergence went; not for the others: without a pause for every sender, a
            # silence after a refusal is as often Spark's gap -- without adaptation most answers are refusals)
            out += [
                row(SECTION, f"{name}: time paused after that (a refusal's Retry-After)", 100 * r["after_paused"],
                    "%", note=_spread(r, "after_paused", 100)),
                row(SECTION, f"{name}: time not asked after that (Spark's gaps)", 100 * r["after_idle"], "%",
                    note=_spread(r, "after_idle", 100)),
            ]
        out += [
            row(SECTION, f"{name}: seconds to follow {c0:,} -> {c1:,}", r["reach_1"], "s",
                "<= 10" if ours else "", r["reach_1"] <= 10 if ours else None, _spread(r, "reach_1")),
            row(SECTION, f"{name}: seconds to follow {c1:,} -> {c2:,}", r["reach_2"], "s",
                "<= 10" if ours else "", r["reach_2"] <= 10 if ours else None, _spread(r, "reach_2")),
            row(SECTION, f"{name}: refused over the run", 100 * r["refused_share"], "%",
                note=_spread(r, "refused_share", 100)),
        ]
    ours = results.get("ours")
    for other in ("none", "alone"):
        theirs = results.get(other)
        borrowed = theirs is None and other == "none" and none is not None
        theirs = none if borrowed else theirs
        if ours is None or theirs is None:
            continue
        delivered = ours["taken"] / max(1.0, theirs["taken"])
        out += [
            row(SECTION, f"{sink}: delivered over the run, ours / {other}", delivered, "x", ">= 1", delivered >= 1,
                "no adaptation's runs on the Retry-After sink (it reads neither header)" if borrowed else ""),
            row(SECTION, f"{sink}: refused over the run, ours - {other}",
                100 * (ours["refused_share"] - theirs["refused_share"]),
                "points", "< 0", ours["refused_share"] < theirs["refused_share"]),
        ]
    return out


def run(quick: bool = False, kinds: tuple[str, ...] = KINDS, sinks: tuple[str, ...] = tuple(SINKS),
        rows_per_batch: int = int(CEILING), repeats: int | None = None) -> list[dict[str, Any]]:
    if shutil.which("java") is None:
        return [row(SECTION, "skipped: Java not found", float("nan"), "", "", None)]
    from .bench_shared import Bench

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    phases = QUICK_PHASES if quick else PHASES
    repeats = repeats or (1 if quick else REPEATS)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-adaptive-") as tmp:
        bench = Bench(quick, Path(tmp))
        try:
            bench.use("local[2]")
            none: dict[str, Any] | None = None   # (it pauses for neither header: one kind of run for both sinks)
            for sink in sinks:
                results: dict[str, dict[str, Any]] = {}
                for kind in kinds:
                    if kind == "none" and none is not None:
                        continue
                    runs = []
                    for i in range(repeats):
                        runs.append(_run_kind(bench, kind, phases_of_repeat(phases, i), SINKS[sink], rows_per_batch))
                        print(f"  adaptive [{sink}] [{kind}]: {runs[-1]}", file=sys.stderr, flush=True)
                    results[kind] = median_of(runs)
                    if kind == "none":
                        none = results[kind]
                out += rows_for(results, phases, sink, none)
        finally:
            bench.close()
    return out


def build_parser() -> Any:
    """The command line (``python -m benchmarks.bench_adaptive``)."""
    import argparse

    # (the jobs' own CLI check: a whole number > 0, or an error that says so)
    from collectors.__main__ import _positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--kind", action="append", choices=KINDS)
    parser.add_argument("--sink", action="append", choices=tuple(SINKS),
                        help="the sink's answers: Retry-After only (whole seconds), or retry-after-ms too")
    parser.add_argument("--rows-per-batch", type=_positive_int, default=int(CEILING),
                        help="rows in each micro-batch of the stream (default: %(default)s, a second of the ceiling)")
    parser.add_argument("--repeats", type=_positive_int, default=None,
                        help=f"runs of each kind on each sink, the median shown (default: {REPEATS}; 1 with --quick)")
    return parser


if __name__ == "__main__":
    args = build_parser().parse_args()
    for r in run(args.quick, tuple(args.kind or KINDS), tuple(args.sink or SINKS), args.rows_per_batch, args.repeats):
        print(r)
