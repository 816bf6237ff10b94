"""Spark throughput with a non-binding limiter against the same job without one, side by side in one run.

The job: ``spark.range(N)`` with a string and a double column (cached, so the runs measure the data path
through Python), passed through ``mapInArrow`` and written to Spark's ``noop`` sink (which forces every row
through, and writes nothing), on a local[2] session. Two variants of the ``mapInArrow`` function:

- *none*: yields each Arrow batch unchanged;
- *limited*: ``collectors.spark.throttle_arrow`` -- each batch acquired (msgs = rows, bytes = the batch's Arrow
  size) from a producer under real token buckets at broker, tenant and topic level, limits far above what the
  job can reach (non-binding), so the figure is the limiter's overhead, not throttling.

No control plane: the workers' participants enforce local limits only (the THROTTLESCOPE_* variables are
cleared for the run). After warm-up runs of each, runs alternate in pairs (none then limited, limited then
none, ...) so drift in the machine affects both alike; the figure is the median of the per-pair ratios
(limited / none rows/s), each variant's rows/s the median of its runs. Goal: >= 0.95. Arrow batches hold
10,000 rows (Spark's default), so the limiter is called once per 10,000 rows. ``quick`` uses a smaller dataset
and fewer runs.

This machine's run-to-run noise (+-15 % on the same job) is far larger than the limiter's cost, so the limited
runs also measure that cost where it is paid: inside each Spark task, the time from an Arrow batch arriving
from upstream to the limiter handing it on, summed against the task's own time (``_measured``). Since every
task carries its own share, throughput with the limiter is at least ``1 - that share`` of throughput without it
-- a figure of the same run that machine noise does not move.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from .common import median, row

SECTION = "spark"
TOPIC = "bench/spark/rows"
HUGE = 1e12


def _limited(batches: Iterator[Any]) -> Iterator[Any]:
    from collectors.runtime import participant
    from collectors.spark import throttle_arrow
    from limiter.policy import Level, Rate

    limits = participant().limits
    limits.set_limit(Level.BROKER, "broker", Rate(HUGE, HUGE))
    limits.set_limit(Level.TENANT, "bench", Rate(HUGE, HUGE))
    limits.set_topic_policy(Level.TOPIC, TOPIC, Rate(HUGE, HUGE))
    yield from throttle_arrow(TOPIC)(batches)


def _none(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def _measured(log_dir: str) -> Any:
    """``_limited``, writing per task (to ``log_dir``) the seconds spent in the limiter and the task's seconds."""
    def limited(batches: Iterator[Any]) -> Iterator[Any]:
        arrived: list[float] = []

        def upstream() -> Iterator[Any]:
            for batch in batches:
                arrived.append(time.perf_counter())
                yield batch

        start, spent = time.perf_counter(), 0.0
        for batch in _limited(upstream()):
            spent += time.perf_counter() - arrived[-1]
            yield batch
        with open(os.path.join(log_dir, f"{os.getpid()}.tasks"), "a") as f:
            f.write(f"{spent} {time.perf_counter() - start}\n")
    return limited


def _task_share(log_dir: str) -> tuple[float, int]:
    """(limiter seconds / task seconds over every measured task, the number of tasks)."""
    spent = total = 0.0
    tasks = 0
    for name in os.listdir(log_dir):
        with open(os.path.join(log_dir, name)) as f:
            for line in f:
                a, b = map(float, line.split())
                spent, total, tasks = spent + a, total + b, tasks + 1
    return (spent / total if total else math.nan), tasks


def _session() -> Any:
    from collectors.jobs.common import spark_session

    spark = spark_session("local[2]", "throttlescope-bench", conf={
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _rows_per_s(df: Any, fn: Any, rows: int) -> float:
    start = time.perf_counter()
    df.mapInArrow(fn, df.schema).write.format("noop").mode("overwrite").save()
    return rows / (time.perf_counter() - start)


def _overhead_us_per_batch(batches: int) -> float:
    """In this process, without Spark: µs that ``_limited`` adds per Arrow batch over ``_none``."""
    import pyarrow as pa

    from collectors.runtime import reset_participant

    batch = pa.RecordBatch.from_pydict({"id": list(range(10_000))})
    try:
        timings = {}
        for fn in (_none, _limited, _none, _limited):
            start = time.perf_counter()
            for _ in fn(iter([batch] * batches)):
                pass
            timings[fn] = (time.perf_counter() - start) / batches * 1e6
        return max(0.0, timings[_limited] - timings[_none])
    finally:
        reset_participant(goodbye=False)


def run(quick: bool = False) -> list[dict[str, Any]]:
    # the JVM's JIT keeps speeding the data path up for about five runs (the first takes twice as long), and a
    # run's time varies by +-15 % even then: warm up well, and take the median of many back-to-back pairs
    rows, warm_up, pairs = (1_000_000, 3, 5) if quick else (4_000_000, 5, 13)
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("THROTTLESCOPE_")}
    spark = _session()
    log_dir = tempfile.mkdtemp(prefix="throttlescope-bench-spark-")
    limited_fn = _measured(log_dir)
    try:
        df = spark.range(rows, numPartitions=4).selectExpr("id", "cast(id as string) as key", "id * 0.5 as value")
        df = df.cache()
        df.count()
        for _ in range(warm_up):
            _rows_per_s(df, _none, rows)
            _rows_per_s(df, _limited, rows)
        plain, limited = [], []
        for i in range(pairs):
            order = ((_none, plain), (limited_fn, limited)) if i % 2 == 0 else ((limited_fn, limited), (_none, plain))
            for fn, out in order:
                out.append(_rows_per_s(df, fn, rows))
        overhead_us = _overhead_us_per_batch(2_000 if quick else 20_000)
        share, tasks = _task_share(log_dir)
    finally:
        spark.stop()
        os.environ.update(saved)
        shutil.rmtree(log_dir, ignore_errors=True)
    ratios = [a / b for a, b in zip(limited, plain, strict=True)]
    ratio = median(ratios)  # each pair ran back to back: slow drift of the machine cancels out
    note = f"local[2], {rows:,} rows, mapInArrow -> noop, median of {pairs} alternating runs"
    return [
        row(SECTION, "mapInArrow, no limiter", median(plain), "rows/s", note=note),
        row(SECTION, "mapInArrow, throttle_arrow (non-binding limits)", median(limited), "rows/s", note=note),
        row(SECTION, "throughput with a non-binding limiter / without", ratio, "x", ">= 0.95x", ratio >= 0.95,
            note=f"median of per-pair ratios {', '.join(f'{r:.2f}' for r in ratios)}; ratio of the two medians "
                 f"{median(limited) / median(plain):.2f} (run-to-run noise is larger than the limiter's cost: "
                 f"{len(plain) * rows // 10_000} acquire calls in all; see the next row)"),
        row(SECTION, "limiter's share of the Spark tasks' time (limited runs)", 100 * share, "%",
            note=f"in the tasks themselves, {tasks} tasks: throughput with the limiter >= {1 - share:.3f}x "
                 "without it, whatever the machine's noise"),
        row(SECTION, "throttle_arrow cost per 10,000-row Arrow batch", overhead_us, "µs",
            note=f"in-process, no Spark; against the {1e6 * 10_000 / median(plain):,.0f} µs Spark spends per "
                 "batch above"),
    ]


if __name__ == "__main__":
    for r in run(quick="--quick" in sys.argv):
        print(r)
