"""The Spark job of test_spark_outage.py, in a process (and JVM) of its own, so the test can take the control plane
away under it whatever SparkSession the test session holds.

``python -m tests.reliability.spark_outage_job URL TOKEN TOPIC ROWS OUT``: a local[2] session whose Python workers
report to URL every 0.5 s (backoff at most 2 s); ``ROWS`` ids in 2 partitions go through ``collectors.spark.
throttle_rows`` on TOPIC (10 rows per acquire); every row that passes is recorded as (id, wall time, participant id,
the worker's local rate of the topic's limiter, connected, failed report rounds so far) and written to OUT as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

APP_ID = "reliability-outage"


def main(url: str, token: str, topic: str, rows: int, out: str) -> None:
    from pyspark.sql import SparkSession

    from collectors.jobs.common import driver_on_loopback
    from collectors.spark import configure

    driver_on_loopback("local[2]")
    builder = (SparkSession.builder.master("local[2]").appName("throttlescope-outage")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    configure(builder, url, token, THROTTLESCOPE_REPORT_INTERVAL_S="0.5", THROTTLESCOPE_BACKOFF_MAX_S="2",
              THROTTLESCOPE_APP_ID=APP_ID)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def task(it: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        from collectors.runtime import participant
        from collectors.spark import throttle_rows
        from limiter.policy import Level

        p = participant()
        p.wait_ready(15.0)        # start under the control plane's limits, not unlimited
        p.report_now()
        limiter = p.limits.limiter(Level.TOPIC, topic)
        for row in throttle_rows(it, topic, batch_rows=10):
            yield row.id, time.time(), p.participant_id, limiter.rate.msgs, p.connected, p.reporter.failures

    try:
        got = spark.range(rows, numPartitions=2).rdd.mapPartitions(task).collect()
    finally:
        spark.stop()
    with open(out, "w") as f:
        json.dump([list(r) for r in got], f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
