"""A Spark Python worker's heap is frozen by its first producer, once (``collectors.worker_heap``): PySpark's full
collection after every task then skips the libraries' objects. Outside a Spark task nothing is frozen."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from collectors.worker_heap import freeze_worker_heap, in_spark_task

pytestmark = pytest.mark.integration

TOPIC = "heap/ns/frozen"


def _sent_and_frozen(rows: Iterable[int]) -> Iterator[tuple[int, int, int, bool]]:
    from collectors.spark import throttle_rows

    sent = sum(1 for _ in throttle_rows(rows, TOPIC))
    # (pid, rows sent, objects frozen, whether a second freeze froze anything)
    yield os.getpid(), sent, gc.get_freeze_count(), freeze_worker_heap()


def test_a_spark_worker_freezes_its_heap_at_its_first_producer_and_only_once(spark: Any) -> None:
    runs = [spark.sparkContext.parallelize(range(100), 2).mapPartitions(_sent_and_frozen).collect()
            for _ in range(2)]
    tasks = [task for run in runs for task in run]
    assert sum(sent for _, sent, _, _ in tasks) == 200
    # pyarrow, pandas, pyspark and this library: tens of thousands of objects (about 90,000 measured)
    assert all(frozen > 10_000 for _, _, frozen, _ in tasks), tasks
    assert not any(again for _, _, _, again in tasks), tasks          # once per worker process, not per task
    # a worker reused by the second job froze nothing more: its frozen objects only go (the first task's, freed)
    first = {pid: frozen for pid, _, frozen, _ in runs[0]}
    assert all(frozen <= first[pid] for pid, _, frozen, _ in runs[1] if pid in first), runs


def test_outside_a_spark_task_nothing_is_frozen() -> None:
    before = gc.get_freeze_count()
    assert not in_spark_task()
    assert freeze_worker_heap() is False
    assert gc.get_freeze_count() == before
