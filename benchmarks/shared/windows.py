"""Admitted events -> what a shared limit did: how much of it was used, and whether any second broke it.

Every task writes one line per admitted batch, ``<unix time> <rows>``, and its span (``task_logs`` reads them).
Over a measuring span ``[t0, t1)``:

- ``mean_ratio``: rows admitted per second of the span / limit (averaged over where its ends fall within a
  window);
- ``worst_window_ratio``: the largest number of rows admitted in any 1-s window starting in the span (windows
  start at every event, so no placement of a window is missed), over the limit;
- ``batch_spans``: a batch job's spans for its mean and its worst window;
- ``throttled_share``: the time the tasks waited for the limiter, over their time in the span (for demand below
  the limit: what the limiter cost a job that needed no limiting);
- ``longest_gap_s``: the longest stretch inside the span with nothing admitted (a stall);
- ``hold_time_s(events, t_change, limit)``: after a live change at ``t_change``, how long until no 1-s window
  starting later is above the new limit (+5 %, + one acquire) -- the time for the change to hold;
- ``pauses(spans, t0, t1)``: the stretches longer than ``PAUSE_S`` in which Spark ran no task at all (the tasks'
  spans, ``task_logs``), e.g. while a killed executor is replaced: no limiter admits rows no task has, and
  ``mean_ratio(..., less=pauses)`` leaves them out of a mean; ``after_kill`` the figures after an executor kill;
- ``combined(runs)``: one workload's figures over several runs of it;
- ``lumps(events)``: the admissions as the stretches they come in (a micro-batch's sends, a wait for the window),
  to see the shape of a second and how it moves: ``python -m benchmarks.shared.windows DIR`` prints them for the
  records ``bench_shared --keep-admitted DIR`` kept, one run a folder;
- ``unused_room(...)``: where a limit went unused -- the room left in the window at each moment, split by whether
  no task ran then (Spark's gaps; beside a paced task, no task of the others: ``TaskLogs.demand_spans``), a task
  waited for the limiter, or the tasks sent at their own pace; with ``--limit L`` the same command prints it for
  each run.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import micro_batches
from .task_logs import read_task_logs

__all__ = ["requests_per_s", "pauses", "after_kill", "combined", "WORST_OF", "PAUSE_S", "throttled_share", "batch_spans", "mean_ratio", "worst_window_ratio", "longest_gap_s", "hold_time_s", "window_sums", "lumps", "unused_room", "new_folder"]


def throttled_share(waits: Iterable[tuple[float, float, float]], tasks: int, t0: float, t1: float) -> float:
    """Seconds the tasks waited for the limiter on admissions in ``[t0, t1)``, over the task-time of that span
    (``tasks`` running all along: Spark's gaps between micro-batches count as send time, so this is a floor)."""
    return sum(w for t, _, w in waits if t0 <= t < t1) / (tasks * (t1 - t0))


def _prefix(events: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    times, sums, total = [], [0.0], 0.0
    for t, n in events:
        times.append(t)
        total += n
        sums.append(total)
    return times, sums


EDGE_S = 1e-9   # an event a whole window after another belongs to the next window, whatever the float rounding


def _between(times: list[float], sums: list[float], a: float, b: float) -> float:
    return sums[bisect.bisect_left(times, b - EDGE_S)] - sums[bisect.bisect_left(times, a - EDGE_S)]


# placements of the span that ``mean_ratio`` averages over: a hundredth of a window apart
PHASES = 100


def mean_ratio(events: Sequence[tuple[float, float]], limit: float, t0: float, t1: float,
               less: Sequence[tuple[float, float]] = (), window_s: float = 1.0) -> float:
    """Rows admitted per second over the limit, in a span one window shorter than ``[t0, t1)`` placed anywhere
    in it (averaged over ``PHASES`` placements), less the stretches ``less``.

    Why not the rows of ``[t0, t1)`` alone: a limiter admits a second's worth in a pattern of its own (a moving
    window in lumps, ours a catch-up after each of Spark's gaps and paces the rest), and a span whose ends fall
    where that pattern is ahead or behind reads it high or low. Redis's lumps start when the old limit's window
    slides out, a fixed time after a live change: a span from two seconds after the change to the next one
    read its cut 1.000 in one run and 0.961 in another, and 0.94-1.0 as its start moved within a second (its mean
    over those starts: 0.974 and 0.981)."""
    span = t1 - t0
    edge = min(window_s, span / 2)
    times, sums = _prefix(events)
    rows = seconds = 0.0
    for k in range(PHASES):
        a = t0 + edge * (k + 0.5) / PHASES
        b = a + span - edge
        rows += _between(times, sums, a, b)
        seconds += (b - a) - sum(max(0.0, min(q, b) - max(p, a)) for p, q in less)
    return rows / (limit * seconds) if seconds > 0 else 0.0


PAUSE_S = 1.0   # no task for longer than this is Spark's pause; a stream's gaps between micro-batches are shorter


def requests_per_s(log_dir: Path, t0: float, t1: float) -> float | None:
    """Grant requests a participant sent per second while it worked in [t0, t1]: over every worker's
    ``<pid>.requests`` (its participant's count at the end of each task), what the counts grew by between its first
    and last task ending in the span, over the time between them (None: no worker ended two tasks in it)."""
    sent = spent_s = 0.0
    for path in Path(log_dir).glob("*.requests"):
        seen = [(float(t), float(n)) for t, n in (line.split() for line in path.read_text().splitlines())
                if t0 <= float(t) <= t1]
        if len(seen) >= 2:
            sent += seen[-1][1] - seen[0][1]
            spent_s += seen[-1][0] - seen[0][0]
    return sent / spent_s if spent_s > 0 else None


def pauses(spans: Iterable[tuple[float, float]], t0: float, t1: float,
           min_s: float = PAUSE_S) -> list[tuple[float, float]]:
    """The stretches of [t0, t1) longer than ``min_s`` that no span covers."""
    out, covered = [], t0
    for a, b in sorted(spans):
        if a - covered > min_s and a < t1:
            out.append((covered, a))
        covered = max(covered, b)
    if t1 - covered > min_s:
        out.append((covered, t1))
    return out


def window_sums(events: Sequence[tuple[float, float]], t0: float, t1: float,
                width_s: float = 1.0) -> list[tuple[float, float]]:
    """(start, rows in [start, start + width)) for a window starting at every event in [t0, t1 - width]."""
    times, sums = _prefix(events)
    starts = [t for t in times if t0 <= t <= t1 - width_s] or [t0]
    return [(s, _between(times, sums, s, s + width_s)) for s in starts]


def worst_window_ratio(events: Sequence[tuple[float, float]], limit: float, t0: float, t1: float) -> float:
    return max(n for _, n in window_sums(events, t0, t1)) / limit


def longest_gap_s(events: Iterable[tuple[float, float]], t0: float, t1: float) -> float:
    last, gap = t0, 0.0
    for t, _ in events:
        if t0 <= t < t1:
            gap = max(gap, t - last)
            last = t
    return max(gap, t1 - last)


def hold_time_s(events: Sequence[tuple[float, float]], t_change: float, limit: float, t_end: float,
                tolerance: float = 0.05, slack: float = 0.0) -> float:
    """Seconds after ``t_change`` until every later 1-s window holds ``limit`` (+ tolerance, + ``slack`` rows:
    one acquire, which a window starting at an admission may hold above the limit); inf if never."""
    over = [s for s, n in window_sums(events, t_change, t_end) if n > limit * (1 + tolerance) + slack]
    if not over:
        return 0.0
    last = max(over) + 1.0   # the last window above it ends here
    return last - t_change if last < t_end else math.inf


def batch_spans(events: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], tuple[float, float]]:
    """A batch job's (span of its mean, span of its worst window): the mean leaves out the start-up (2 s) and the
    last half second, unless the job was over too soon for that (a limit that did not hold: its whole span); the
    worst window looks at every second of it, the start-up's too."""
    first, last = events[0][0], events[-1][0]
    mean_span = (first + 2.0, last - 0.5)
    if mean_span[1] - mean_span[0] < 1.0:
        mean_span = (first, max(last, first + 1.0))
    return mean_span, (first, last + 1.0)


def after_kill(events: Sequence[tuple[float, float]], spans: Sequence[tuple[float, float]], limit: float,
               after: float, t1: float) -> dict[str, float]:
    """The means from ``after`` (a little after an executor was killed) on, over whole seconds up to ``t1`` (a
    limiter that admits each micro-batch in a burst at its start read up to a batch more or less by where the
    last event fell): over all that time, and (given the tasks' spans) less Spark's pauses."""
    end = after + max(1.0, math.floor(t1 - after))
    out = {"after_mean": mean_ratio(events, limit, after, end)}
    if spans:   # (the helpers' tasks say when they ran: leave out Spark's pauses, when no task ran)
        paused = pauses(spans, after, end)
        out["after_paused_s"] = sum(b - a for a, b in paused)
        out["after_running_mean"] = mean_ratio(events, limit, after, end, less=paused)
    return out


# figures where one bad run is the figure (a window over the limit, a stall, a record lost)
WORST_OF = ("worst", "after_worst", "gap_s", "gap_around_s", "outage_gap_s", "hold_s", "lost", "twice")


def combined(runs: list[dict[str, float]]) -> dict[str, float]:
    """One workload's figures over ``runs`` of it: the median of each, the worst of those in ``WORST_OF``; and of
    the mean and the throttle time, the lowest and the highest run (``mean_low``, ``mean_high``,
    ``throttled_low``, ``throttled_high``: a reader sees how far runs spread)."""
    if len(runs) == 1:
        return runs[0]
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for r in runs for k in r):   # (a figure some runs lack: over those that have it)
        values = [r[key] for r in runs if key in r]
        out[key] = max(values) if key in WORST_OF else statistics.median(values)
        if key in ("mean", "throttled"):
            out[f"{key}_low"], out[f"{key}_high"] = min(values), max(values)
    out["runs"] = len(runs)
    return out


LUMP_GAP_S = 0.08   # nothing admitted for longer than this ends a lump: the keepers' beat is 20 ms


def lumps(events: Sequence[tuple[float, float]], gap_s: float = LUMP_GAP_S) -> list[tuple[float, float, float]]:
    """``(start, end, rows)`` of each stretch of admissions with no pause longer than ``gap_s`` inside, in time
    order. A stream whose micro-batch ends with a chunk that waits for the window shows it as a lump of one
    acquire a second."""
    out: list[tuple[float, float, float]] = []
    for t, n in events:
        if out and t - out[-1][1] <= gap_s:
            start, _, rows = out[-1]
            out[-1] = (start, t, rows + n)
        else:
            out.append((t, t, n))
    return out


ROOM_STEP_S = 0.001   # the room is read each millisecond: finer than a keeper's beat (20 ms) and most waits


def unused_room(events: Sequence[tuple[float, float]], waits: Iterable[tuple[float, float, float]],
                spans: Iterable[tuple[float, float]], limit: float, t0: float, t1: float,
                window_s: float = 1.0) -> dict[str, float]:
    """Where the limit went unused in ``[t0, t1)``, as parts of it: at each moment the room is the limit less what
    the window ending then admitted, and its average over the span is what the mean admitted falls short by. Split
    by what Spark was doing at that moment: ``no task`` (between micro-batches, or between a worker's tasks), ``a
    task waiting`` (an admission was waiting for the limiter: room it did not get), ``tasks sending`` (the rest:
    Spark's own pace). A limiter whose admissions lock to the window's phase has no room free while no task runs:
    Spark's gaps fall where the window is full."""
    times, sums = _prefix(events)
    waiting = sorted((t - w, t) for t, _, w in waits if w > 0)
    running = sorted(spans)
    out = dict.fromkeys(("no task", "a task waiting", "tasks sending"), 0.0)
    steps = max(1, int((t1 - t0) / ROOM_STEP_S))
    w = r = 0
    open_waits: list[float] = []   # ends of the waits begun by now
    open_spans: list[float] = []
    for k in range(steps):
        t = t0 + (k + 0.5) * (t1 - t0) / steps
        while w < len(waiting) and waiting[w][0] <= t:
            open_waits.append(waiting[w][1])
            w += 1
        while r < len(running) and running[r][0] <= t:
            open_spans.append(running[r][1])
            r += 1
        open_waits = [e for e in open_waits if e > t]
        open_spans = [e for e in open_spans if e > t]
        room = max(0.0, limit - _between(times, sums, t - window_s, t))
        state = "a task waiting" if open_waits else "tasks sending" if open_spans else "no task"
        out[state] += room / limit / steps
    return out


def new_folder(value: str) -> Path:
    """The folder ``bench_shared --keep-admitted`` keeps the records in: new or empty (one run's records are
    never mixed with another's); argparse's type check."""
    import argparse

    path = Path(value)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise argparse.ArgumentTypeError(f"{value!r} must be a new or empty folder")
    return path


def _print_shape(run_dir: Path, limit: float | None, skip_s: float) -> None:
    logs = read_task_logs(run_dir)   # (read once: the lumps, the unused room and Spark's gaps)
    events = logs.events
    if not events:
        print(f"{run_dir}: no admissions recorded")
        return
    t0 = events[0][0]
    print(f"{run_dir.name}: {sum(n for _, n in events):.0f} rows in {events[-1][0] - t0:.3f} s")
    last = None
    for start, end, rows in lumps(events):
        since = "" if last is None else f"  (+{start - last:.3f} s)"
        print(f"  {start - t0:8.3f} s  {end - start:6.3f} s long  {rows:7.0f} rows{since}")
        last = start
    if limit is None:
        return
    if events[-1][0] - t0 <= skip_s:
        print(f"  no unused room: the records end within the first {skip_s:g} s (--skip-s)")
        return
    room = unused_room(events, logs.waits, logs.demand_spans, limit, t0 + skip_s, events[-1][0])
    print(f"  unused room from {skip_s:g} s on, in points of the limit: {sum(room.values()) * 100:.2f}: "
          + ", ".join(f"{state} {part * 100:.2f}" for state, part in room.items()))
    if len(gaps := micro_batches.gaps_s(logs.demand_spans, t0 + skip_s, events[-1][0])) >= 2:
        print(f"  Spark's gap between micro-batches from {skip_s:g} s on: {statistics.mean(gaps):.3f} s on average "
              f"({min(gaps):.3f}-{max(gaps):.3f}, {len(gaps)} gaps)")


def main(argv: list[str] | None = None) -> None:
    import argparse

    from collectors.__main__ import _positive_float  # (the jobs' own CLI check: > 0 and finite)

    parser = argparse.ArgumentParser(prog="python -m benchmarks.shared.windows",
                                     description="The shape of what bench_shared --keep-admitted kept: each run's "
                                                 "admissions as lumps, and with --limit where the limit went unused.")
    parser.add_argument("dir", type=Path, help="the folder --keep-admitted wrote (one folder per run), or one run's")
    parser.add_argument("--limit", type=_positive_float, help="the run's limit in msgs/s (a constant one: not a live cut's)")
    parser.add_argument("--skip-s", type=float, default=5.0,
                        help="seconds after the first admission left out of the unused room (the benchmark's "
                             "warm-up; default 5)")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        parser.error(f"{str(args.dir)!r} is not a folder")
    if not (math.isfinite(args.skip_s) and args.skip_s >= 0):
        parser.error(f"--skip-s must be a number of seconds of 0 or more, got {args.skip_s!r}")
    runs = sorted(p for p in args.dir.iterdir() if p.is_dir()) or [args.dir]
    for run_dir in runs:
        _print_shape(run_dir, args.limit, args.skip_s)


if __name__ == "__main__":
    main()
