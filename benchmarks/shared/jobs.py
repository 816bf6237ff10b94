"""The Spark workloads: a Structured Streaming job and batch jobs, each passing rows through ``mapInArrow``.

- ``stream``: Spark's ``rate-micro-batch`` source (``rows_per_batch`` rows per trigger over ``partitions``
  tasks, as fast as the sink lets it: backpressure), through ``foreachBatch`` -> ``mapInArrow(fn)`` -> Spark's
  ``noop`` sink, for ``duration_s``, stopped between micro-batches as the publish job's stream is
  (``collectors.jobs.streaming.run_until``).
- ``batch``: one job whose partitions hold ``sizes[i]`` rows each (a batch of short tasks, or skewed ones),
  ``mapInArrow(fn)`` -> ``noop``.
Arrow batches hold ``ARROW_ROWS`` rows (``spark.sql.execution.arrow.maxRecordsPerBatch``), so a task acquires
100 rows at a time, as the helpers' row iterator does.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["session", "stream", "batch", "publish", "twice_if_failed", "ARROW_ROWS", "SCHEMA"]

ARROW_ROWS = 100
SCHEMA = "value long"


def session(master: str, url: str, token: str, work: Path, warm_up_tasks: int, warm_up_s: float, *,
            report_interval_s: float = 1.0, warm_up_rows: int = 1000, app_name: str = "throttlescope-bench-shared"
            ) -> Any:
    """A SparkSession on ``master`` configured for the control plane at ``url`` (``collectors.spark.configure``,
    which ships the library; this package is added with ``addPyFile``), after an unmeasured stream of
    ``warm_up_tasks`` tasks for ``warm_up_s`` through the helpers on a topic with no limit."""
    from pyspark.sql import SparkSession

    from collectors.jobs.common import driver_on_loopback
    from collectors.shipping import library_archive
    from collectors.spark import configure

    from .kinds import arrow_fn

    driver_on_loopback(master)   # local[2] or the benchmark's own cluster on loopback
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.executor.memory", "512m")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_ROWS)))
    configure(builder, url, token, THROTTLESCOPE_REPORT_INTERVAL_S=str(report_interval_s))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # the workloads' task functions live in this package: the cluster's executors get it as the library
    spark.sparkContext.addPyFile(str(library_archive(work, ("benchmarks",))))
    # the first streaming query of a session spends seconds starting up, and each Python worker's first producer
    # waits for its participant's first answer: neither in any measured run (the warm-up topic has no limit, so it
    # goes through the helpers at full speed). As wide as the widest stream and as long as a run: after 8 s of 2
    # tasks of 100 rows, the first run of an 8-task stream on the cluster read 0.87-0.94 of the limit whichever
    # kind it was (six runs of ours, one of Redis: the JVMs still warming up), the runs after it 0.97-0.998; after
    # this warm-up the first read 0.975
    def warm_up() -> None:
        with tempfile.TemporaryDirectory(prefix="warm-up-", dir=work) as log_dir:
            stream(spark, arrow_fn("ours", ("warm/up/t",), log_dir), warm_up_tasks, warm_up_rows, warm_up_s)

    twice_if_failed(warm_up, "the session's warm-up stream")
    return spark


def twice_if_failed(run: Callable[[], None], what: str) -> None:
    """``run()``, and once more if it raises a ``RuntimeError`` (a Spark job or streaming query that failed),
    said on stderr; a second failure is raised. For unmeasured work only: Spark 4.3 on ``local[2]``, where a task
    is not retried, now and then fails one as it takes an idle Python worker from its pool (a closed channel;
    ``docs/benchmarks.md``), and a failed warm-up cost every row of its target (``did not start``)."""
    try:
        run()
    except RuntimeError as e:
        print(f"{what} failed ({str(e)[:300]}); running it once more", file=sys.stderr, flush=True)
        run()


def stream(spark: Any, fn: Callable, partitions: int, rows_per_batch: int, duration_s: float,
           during: Callable[[float], None] | None = None, commit_s: float = 0.0) -> None:
    """Run the streaming workload for ``duration_s``; ``during(t0)`` runs on a thread once it has started. Each
    micro-batch's write is followed by ``commit_s`` on the driver: the commit of a job whose micro-batch ends with
    one (offsets to an external table, a checkpoint on remote storage), a longer gap between two micro-batches."""
    from collectors.jobs.streaming import run_until

    def sink(batch_df: Any, batch_id: int) -> None:
        batch_df.select("value").mapInArrow(fn, SCHEMA).write.format("noop").mode("append").save()
        if commit_s > 0:
            time.sleep(commit_s)

    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
              .option("numPartitions", partitions).load())
    with tempfile.TemporaryDirectory(prefix="bench-stream-") as checkpoint:
        def start(each: Callable[[Any, int], None]) -> Any:
            return (source.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
                    .trigger(processingTime="0 seconds").start())

        t0 = time.time()
        helper = threading.Thread(target=during, args=(t0,), daemon=True) if during else None
        if helper:
            helper.start()
        try:
            run_until(spark, start, sink, t0 + duration_s, what="the streaming workload")
        finally:
            if helper:
                helper.join(timeout=60)


def batch(spark: Any, fn: Callable, sizes: list[int]) -> None:
    """Run one batch job whose partition ``i`` holds ``sizes[i]`` rows."""
    sc = spark.sparkContext
    rdd = sc.parallelize(range(len(sizes)), len(sizes)).flatMap(lambda i, s=tuple(sizes): range(s[i]))
    df = spark.createDataFrame(rdd.map(lambda v: (v,)), SCHEMA)
    df.mapInArrow(fn, SCHEMA).write.format("noop").mode("append").save()


def publish(spark: Any, topics: tuple[str, ...], work: str, partitions: int, duration_s: float,
            rows: int | None = None, during: Callable[[float], None] | None = None,
            delivery: dict[str, float] | None = None) -> list[tuple[float, float]]:
    """The project's own publish job (several producer threads per task, every level's limiter) on ``topics``:
    streaming (Spark's ``rate-micro-batch``, the CLI's defaults) for ``duration_s``, or, given ``rows``, a batch
    job over a Parquet dataset of that many records in ``partitions`` files. ``during(t0)`` runs on a thread once
    the job has started. Returns the admitted events, ``(sent_at, rows)`` per acquire, read back from what the
    job delivered (a task attempt that died delivered nothing). For a batch job ``delivery`` gets ``lost`` (input
    records not delivered) and ``twice`` (records delivered more than once)."""
    from pathlib import Path

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from collectors.jobs import PublishConfig, make_input, read_output, run_publish

    output = str(Path(work) / "out")
    source = Path(work) / "in"
    if rows is None:
        config = PublishConfig(output=output, source="rate", topics=topics, duration_s=duration_s,
                               partitions=partitions)
    else:
        make_input(source, {t: rows // len(topics) for t in topics}, files=partitions)
        config = PublishConfig(output=output, source="files", input=str(source), topics=topics, duration_s=None,
                               partitions=partitions)
    helper = threading.Thread(target=during, args=(time.time(),), daemon=True) if during else None
    if helper:
        helper.start()
    try:
        run_publish(spark, config)
    finally:
        if helper:
            helper.join(timeout=60)
    table = read_output(output)
    if rows is not None and delivery is not None:
        sent = table.column("id").to_pylist()
        wanted = set(pq.read_table(source).column("id").to_pylist())
        delivery["lost"] = float(len(wanted - set(sent)))
        delivery["twice"] = float(len(sent) - len(set(sent)))
    if table.num_rows == 0:
        return []
    counts = pc.value_counts(table.column("sent_at")).to_pylist()
    return sorted((c["values"], float(c["counts"])) for c in counts)
