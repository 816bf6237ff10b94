"""Spark's own pace in a run's records: its micro-batches and the gaps between them.

Why
---
A stream's use of a shared limit is bounded by Spark's pace as well as by the limiter. Spark's gap between two
micro-batches -- from the last task of one ending to the first task of the next starting: the driver's commit and
planning, the tasks' launch -- is the host's, and it moves from hour to hour: on ``local[2]`` the two applications'
driver took about 0.2 s in one hour and 0.29-0.31 s in another with no limiter, 0.28-0.46 s with one (either kind).
A micro-batch of a window's worth beside another sender keeps at most ``1 / (1 + gap / 2)`` of the limit whatever
the limiter (docs/benchmarks.md), so a mean that moved with the hour is read beside the gaps its runs measured: each
stream's mean row says them, and ``python -m benchmarks.shared.windows`` prints them for kept records.

How
---
``micro_batches(spans)`` groups the tasks' spans ``(start, end)``: a task that starts more than ``APART_S`` after
every earlier task ended begins the next micro-batch. A micro-batch's own tasks overlap (one per task slot) or
follow each other within 20-50 ms (one core, measured), and Spark's gap between two micro-batches is 0.2 s or more
here, so a batch job's tasks are one group. Give it the spans of the tasks that send as fast as the limit lets
them (``TaskLogs.demand_spans``): a paced task beside them runs through their gaps. ``gaps_s(spans, t0, t1)``:
Spark's gaps before the micro-batches that start in ``[t0, t1)``.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["APART_S", "micro_batches", "gaps_s"]

APART_S = 0.15   # a task starting longer than this after every earlier one ended starts a micro-batch (see above)


def micro_batches(spans: Iterable[tuple[float, float]], apart_s: float = APART_S) -> list[tuple[float, float, int]]:
    """``(start, end, tasks)`` of each micro-batch, in time order: its first task's start, its last task's end."""
    out: list[tuple[float, float, int]] = []
    for start, end in sorted(spans):
        if out and start - out[-1][1] <= apart_s:
            first, last, tasks = out[-1]
            out[-1] = (first, max(last, end), tasks + 1)
        else:
            out.append((start, end, 1))
    return out


def gaps_s(spans: Iterable[tuple[float, float]], t0: float, t1: float, apart_s: float = APART_S) -> list[float]:
    """Spark's gap before each micro-batch that starts in ``[t0, t1)`` (the first of all has none)."""
    batches = micro_batches(spans, apart_s)
    pairs = zip(batches, batches[1:], strict=False)   # (each micro-batch and the one after it)
    return [after[0] - before[1] for before, after in pairs if t0 <= after[0] < t1]
