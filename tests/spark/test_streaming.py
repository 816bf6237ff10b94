"""A foreachBatch stream run back to back until a deadline and stopped between micro-batches (run_until)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from collectors.jobs.streaming import run_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]

LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"


def _rate_query(spark: Any, checkpoint: str):
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 10)
              .option("numPartitions", 1).load())

    def start(sink: Any) -> Any:
        return (source.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
                .trigger(processingTime="0 seconds").start())
    return start


def test_a_stop_ends_between_batches_and_a_rerun_sends_the_batch_that_was_not_committed(spark: Any,
                                                                                        tmp_path: Any) -> None:
    start = _rate_query(spark, str(tmp_path / "checkpoint"))
    seen: list[tuple[int, list[int]]] = []

    def each_batch(batch_df: Any, batch_id: int) -> None:
        seen.append((batch_id, sorted(r.value for r in batch_df.collect())))

    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    level_before = str(log4j.LogManager.getLogger(LOGGER).getLevel())
    run_until(spark, start, each_batch, time.time() + 3.0)
    assert len(seen) >= 2, seen
    ids = [v for _, values in seen for v in values]
    assert ids == list(range(len(ids))), "every batch ran whole, in order"
    assert str(log4j.LogManager.getLogger(LOGGER).getLevel()) == level_before, "the planned stop's silence ends"

    last_batch, last_ids = seen[-1]
    seen.clear()
    run_until(spark, start, each_batch, time.time() + 0.5)
    first_batch, first_ids = seen[0]
    # the batch that met the deadline raised before it ran: Spark did not commit it and runs it now
    assert first_batch == last_batch + 1
    assert first_ids[0] == last_ids[-1] + 1, "no ids were skipped by the stop"


def test_a_failing_batch_is_raised_with_what_failed(spark: Any, tmp_path: Any) -> None:
    start = _rate_query(spark, str(tmp_path / "checkpoint"))

    def each_batch(batch_df: Any, batch_id: int) -> None:
        raise ValueError(f"the sink refused batch {batch_id}")

    with pytest.raises(RuntimeError, match="^the test stream failed: ValueError: the sink refused batch 0$"):
        run_until(spark, start, each_batch, time.time() + 30.0, what="the test stream")
