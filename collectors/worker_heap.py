"""A Spark Python worker's heap, frozen once: PySpark's collection after every task should not rescan it.

Why
---
PySpark's worker runs a full garbage collection after every task (``gc.collect()`` in its daemon's loop, before it
reads the next task), and a full collection scans every object the process holds. Measured here (one core, a quiet
host, the best of five): 37 ms in a process that has pyarrow, pandas and ``pyspark.sql`` loaded, 48-64 ms once this
library's participant is loaded there too. A stream's workers spend that after each of their tasks, all at once at a
micro-batch's end -- sixteen workers on two cores half a second of both cores' time, just while the driver commits the
micro-batch and plans the next one, and the control plane answers the tasks' give-backs.

How
---
``freeze_worker_heap()``, called by the participant before it makes a producer or a dispatcher
(``collectors.runtime``), freezes what the process holds then (``gc.freeze()``) -- the modules, the participant's
threads, its HTTP client: objects that live as long as the worker -- once per process, and only inside a Spark task
(``TaskContext``): a driver or a test process is left as it is. The collection after each task then scans only what
later tasks made: well under a millisecond. Frozen objects still free themselves when their last reference goes
(producers do, and a pool is given back then), so the only cost is a reference cycle among them that became garbage
later: it is never collected. The freeze comes before the task's first producer is made, so that producer is not
frozen with the rest. THROTTLESCOPE_GC_FREEZE=0 leaves the collector alone (``collectors.config``).
"""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["freeze_worker_heap", "in_spark_task"]

_frozen_in_pid: int | None = None   # the process that froze (a worker forked from it has not)


def in_spark_task() -> bool:
    """Whether a Spark task runs here (a Python worker's ``TaskContext``); never imports pyspark (a process that
    has not cannot be running a task) and never fails because of Spark."""
    if "pyspark" not in sys.modules:
        return False
    try:
        from pyspark import TaskContext
        return TaskContext.get() is not None
    except Exception:  # noqa: BLE001 - asking must not break a send
        return False


def freeze_worker_heap() -> bool:
    """Inside a Spark task, once per process: ``gc.freeze()`` what it holds (see the module essay). True if it froze
    now; False outside a task, or when this process did already."""
    global _frozen_in_pid
    if _frozen_in_pid == os.getpid() or not in_spark_task():
        return False
    gc.freeze()
    _frozen_in_pid = os.getpid()
    return True
