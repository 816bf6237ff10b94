"""Three ways a Spark job sends its rows from Python, one request a row, to a server behind a topic limit -- the
``sends`` rows (``benchmarks/bench_sends.py``). Each posts through ``adaptive_kinds``' keep-alive client.

- ``foreach after mapInArrow``: ``df.mapInArrow(throttle_arrow(topic), schema).foreach(post)``, the form that reads
  naturally, and what the README showed until 2026-12-04: Spark runs ``post`` in another Python worker than the
  limiter, and feeds it the admitted rows pickled, in lumps;
- ``throttle_foreach``: ``df.foreachPartition(throttle_foreach(topic, post))``, the helper;
- ``inside mapInArrow``: the job's own ``mapInArrow`` function iterates ``throttle_arrow(topic)(batches)`` and
  posts each admitted row there (a batch API's form).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .adaptive_kinds import post_records

__all__ = ["WAYS", "send"]

WAYS = ("foreach after mapInArrow", "throttle_foreach", "inside mapInArrow")


def send(spark: Any, way: str, topic: str, url: str, rows: int, partitions: int = 2) -> None:
    """Run one job of ``rows`` rows over ``partitions`` tasks that sends them ``way`` (see the module doc)."""
    from collectors.spark import throttle_arrow, throttle_foreach

    if way not in WAYS:
        raise ValueError(f"way must be one of {WAYS}, got {way!r}")
    df = spark.range(0, rows, numPartitions=partitions)

    def post(_row: Any) -> None:
        post_records(url, 1)

    if way == "foreach after mapInArrow":
        df.mapInArrow(throttle_arrow(topic), df.schema).foreach(post)
    elif way == "throttle_foreach":
        df.foreachPartition(throttle_foreach(topic, post))
    else:
        def inside(batches: Iterator[Any]) -> Iterator[Any]:
            for batch in throttle_arrow(topic)(batches):
                for _ in range(batch.num_rows):
                    post_records(url, 1)
            return iter(())
        df.mapInArrow(inside, df.schema).write.format("noop").mode("overwrite").save()
