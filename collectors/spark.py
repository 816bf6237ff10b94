"""Spark helpers: put a task's output through the limiters, one batch at a time.

How it works and why
--------------------
Inside a Spark task each helper takes a producer from this process's participant (``collectors.runtime``:
one per Python worker, reused across tasks) and, for every batch it passes on, calls
``producer.acquire(msgs=rows, bytes=size)`` *before* yielding the batch downstream. While any level says the
producer is over its limit, ``acquire`` waits on an event -- the task simply stops pulling its input, so nothing
is dropped and nothing spins. Accounting is per batch, never per row: a row iterator is grouped into batches of
``batch_rows`` (default 100) so the limiter costs one call per batch, and pandas/Arrow batches are charged whole --
unless a batch is large beside the producer's tightest limit: it is then charged and passed on in slices of at most
a 40th of that limit's second (``Producer.most_per_acquire``; 25 rows at 1,000 msgs/s, of Spark's default 10,000-row
Arrow batches, or of ``throttle_rows``' batches of 100). Each worker sharing a limit may run up to one charge ahead
of it, so a charge of a 10,000-row batch against a 1,000 msgs/s limit was ten seconds of it at once. With no binding
limit (a 40th of the limit's second is at least the batch), a batch goes on whole, as one charge. Before a sliced
batch's first charge the helper says all its rows are coming (``Producer.will_send``): a shared limit's pool asks for
them in one answer, not a few sends at a time.

- ``throttle_rows(rows, topic)``        for ``rdd.mapPartitions`` / ``df.rdd.mapPartitions``: yields the same
                                        rows, ``batch_rows`` at a time. ``topic`` may be a function of the row
                                        (per-record identity): a batch is then charged per topic it holds.
- ``throttle_pandas(topic)``            returns a function for ``df.mapInPandas(f, schema)``.
- ``throttle_arrow(topic)``             returns a function for ``df.mapInArrow(f, schema)``.
- ``throttle_foreach(topic, send)``     returns a function for ``df.foreachPartition(f)``: each row is handed to
                                        ``send`` once admitted, in the same Python worker (see below).
- ``throttle_foreach_batch(sink, topic)`` wraps a streaming ``foreachBatch`` sink: each micro-batch is passed
                                        through ``mapInArrow`` with the limiter, then given to ``sink``.
- ``report_outcome(topic, outcome)``    where a task sends to a sink behind the limit: how the send ended ("ok",
                                        "throttled" with its Retry-After, "error"); an adaptive limit learns the
                                        sink's capacity from every task's answers (``limiter.adaptive``).
- ``configure(builder, url, token)``    passes THROTTLESCOPE_URL, the token and the report interval to every
                                        executor (``spark.executorEnv.*``), ships the library's packages to them
                                        (``spark.submit.pyFiles``; ``ship=False`` not to) and makes the workers
                                        run this interpreter (``PYSPARK_PYTHON``, unless set already).

Where the send happens: the limiter paces what leaves its own function, so a send to the limited system must be
made there -- in the function that iterates ``throttle_arrow(topic)(batches)`` or ``throttle_rows(rows, topic)``,
in ``throttle_foreach``'s ``send``, or by a writer in the JVM that reads the throttled batches (``.write.jdbc``,
the Kafka sink). For that writer ``configure`` turns on Spark's pipelined Python UDFs, which hand each batch on
as it is yielded: without them a worker buffers 64 KB of output, and 6,000 small rows paced over 12 s reached the
writer within one second. Not in a later Python step of the DataFrame: ``df.mapInArrow(throttle_arrow(t),
schema).foreach(post)`` runs ``post`` in another Python worker, which Spark feeds the admitted rows in lumps --
measured on ``local[2]`` under 500 msgs/s, the server got nothing for 12-13 s, then 3.2-3.3 times the limit; with
``df.foreachPartition(throttle_foreach(t, post))`` it gets the limit. A chain of RDD steps
(``rdd.mapPartitions(...).foreach(...)``) runs in one worker, and is fine; an RDD's rows that go on to a JVM
writer reach it as the worker's buffer fills (the pipelined setting is the SQL UDFs' alone): a JVM writer wants
``throttle_arrow`` or ``throttle_pandas``. ``report_outcome`` belongs beside the send for the same reason: an
adaptive limit's pause can only hold sends that pass its limiter.

Sizes: Arrow batches are charged their ``nbytes``; pandas batches the Arrow size of their columns (numeric
columns by their buffer size, which is what Arrow holds; other columns converted to find out). Rows of an RDD are
charged ``row_bytes(row)`` (default: the length of ``str(row)``, UTF-8) -- pass a cheaper or truer one if you have it.

The first producer a Python worker hands out waits (at most ``THROTTLESCOPE_READY_TIMEOUT_S``, default 10 s) for
the control plane's first answer, so a task never starts sending before its worker knows the limits. It also freezes
the worker's heap, so that PySpark's collection after every task does not rescan this library's objects, nor
pyarrow's and pandas' (``collectors.worker_heap``; THROTTLESCOPE_GC_FREEZE=0 not to).

A producer is named ``<topic>#p<partition>`` after the Spark partition that sends (the TaskContext's), or the
``producer`` argument: the fairness queue then shows which task waits.
"""

from __future__ import annotations

import logging
import math
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

from .shipping import ship_library, shipping_enabled

__all__ = ["throttle_rows", "throttle_pandas", "throttle_arrow", "throttle_foreach", "throttle_foreach_batch",
           "report_outcome", "configure", "DEFAULT_BATCH_ROWS", "PIPELINED", "arrow_size_of_pandas"]

DEFAULT_BATCH_ROWS = 100
PIPELINED = "spark.python.udf.pipelined.enabled"   # a Python worker's output reaches the JVM batch by batch
log = logging.getLogger(__name__)
_ENV_PASSED = ("THROTTLESCOPE_URL", "THROTTLESCOPE_TOKEN", "THROTTLESCOPE_REPORT_INTERVAL_S", "THROTTLESCOPE_APP_ID",
               "THROTTLESCOPE_READY_TIMEOUT_S", "THROTTLESCOPE_GC_FREEZE")


def _producer(topic: str, name: str | None, options: dict[str, Any]):
    from .runtime import participant  # imported in the worker, not when Spark pickles the function

    runtime = participant()
    # A new Python worker knows no limits until its first report is answered; a task that started sending at
    # once would run unlimited for that long. So the first producer of a process waits (bounded) for it.
    timeout_s = runtime.config.ready_timeout_s
    if not runtime.wait_ready(timeout_s):
        log.warning("throttlescope: no answer from the control plane within %.0f s; sending under the limits "
                    "known so far and applying the policies when they arrive", timeout_s)
    return runtime.producer(topic, name or f"{topic}#p{_partition_id()}", **options)


def _partition_id() -> str:
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return "?"
    context = TaskContext.get()
    return str(context.partitionId()) if context is not None else "driver"


def _row_bytes(row: Any) -> int:
    return len(str(row).encode())


def _check_batch_rows(batch_rows: Any) -> None:
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"batch_rows must be a whole number >= 1, got {batch_rows!r}")


def throttle_rows(
    rows: Iterable[Any],
    topic: str | Callable[[Any], str],
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    row_bytes: Callable[[Any], int] = _row_bytes,
    producer: str | None = None,
    **producer_options: Any,
) -> Iterator[Any]:
    """Yield ``rows`` unchanged, acquiring ``batch_rows`` rows at a time from the topic's producer(s) -- in
    sends of at most ``most_per_acquire()`` when a batch is larger (a single topic's rows go on as each send is
    acquired; with a topic per row, the batch goes on once all its topics' sends are)."""
    _check_batch_rows(batch_rows)
    producers: dict[str, Any] = {}
    one_topic = isinstance(topic, str)
    iterator = iter(rows)
    while batch := list(islice(iterator, batch_rows)):
        if one_topic:
            groups = {topic: batch}
        else:
            groups = {}
            for row in batch:
                groups.setdefault(topic(row), []).append(row)
        for name, group in groups.items():
            if name not in producers:
                producers[name] = _producer(name, producer, producer_options)
            for offset, length in _acquired_sends(producers[name], len(group), sum(row_bytes(r) for r in group)):
                if one_topic:
                    yield from batch[offset:offset + length]
        if not one_topic:
            yield from batch


def arrow_size_of_pandas(frame: Any) -> int:
    """The Arrow size of a pandas batch: numeric columns by their buffers, the others by converting them."""
    import pyarrow as pa

    total = 0
    for name in frame.columns:
        column = frame[name]
        if column.dtype.kind in "biufcmM":
            total += column.to_numpy(copy=False).nbytes
        else:
            total += pa.array(column, from_pandas=True).nbytes
    return total


def _acquired_sends(producer: Any, rows: int, nbytes: float) -> Iterator[tuple[int, int]]:
    """Acquire ``rows`` rows (``nbytes`` bytes) from ``producer``: at once, or, when they are more than
    ``producer.most_per_acquire()``, in sends of at most that (bytes charged by each send's part of the rows, so
    the charges add up to the batch's). Yields each send's ``(offset, length)`` once it is acquired."""
    most_msgs, most_bytes = producer.most_per_acquire()
    step = min(most_msgs, most_bytes * rows / nbytes if nbytes > 0 else math.inf)
    if step >= rows:
        producer.acquire(msgs=rows, bytes=nbytes)
        yield 0, rows
        return
    # a batch of several sends: its pool asks for all of it in one answer, not a few sends at a time. (Not a batch
    # of one send: a task of many small batches -- 100 rows at 10,000 a second -- asked one batch an answer, and
    # read 0.88 of its limit, not 0.998; said nothing, its pool asks three sends ahead)
    producer.will_send(rows)
    step = max(1, int(step))
    for offset in range(0, rows, step):
        length = min(step, rows - offset)
        producer.acquire(msgs=length, bytes=nbytes * length / rows)
        yield offset, length


def _charged_slices(producer: Any, batch: Any, rows: int, nbytes: float,
                   cut: Callable[[Any, int, int], Any]) -> Iterator[Any]:
    """Pass ``batch`` (``rows`` rows, ``nbytes`` bytes) on after acquiring it from ``producer``: whole, or as
    ``cut(batch, offset, length)`` slices, each acquired before it is yielded (``_acquired_sends``)."""
    for offset, length in _acquired_sends(producer, rows, nbytes):
        yield batch if length == rows else cut(batch, offset, length)


def throttle_pandas(topic: str, *, producer: str | None = None, **producer_options: Any):
    """A function for ``df.mapInPandas(f, df.schema)`` that passes each batch on after acquiring it (in slices
    when it is large beside the tightest limit: see the module essay)."""

    def throttled(frames: Iterator[Any]) -> Iterator[Any]:
        limiter = _producer(topic, producer, producer_options)
        for frame in frames:
            yield from _charged_slices(limiter, frame, len(frame), arrow_size_of_pandas(frame),
                                      lambda f, at, n: f.iloc[at:at + n])

    return throttled


def throttle_arrow(topic: str, *, producer: str | None = None, **producer_options: Any):
    """A function for ``df.mapInArrow(f, df.schema)`` that passes each RecordBatch on after acquiring it (in
    slices when it is large beside the tightest limit: see the module essay)."""

    def throttled(batches: Iterator[Any]) -> Iterator[Any]:
        limiter = _producer(topic, producer, producer_options)
        for batch in batches:
            yield from _charged_slices(limiter, batch, batch.num_rows, batch.nbytes, lambda b, at, n: b.slice(at, n))

    return throttled


def throttle_foreach(
    topic: str | Callable[[Any], str],
    send: Callable[[Any], Any],
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    row_bytes: Callable[[Any], int] = _row_bytes,
    producer: str | None = None,
    **producer_options: Any,
) -> Callable[[Iterable[Any]], None]:
    """A function for ``df.foreachPartition(f)`` (or ``rdd.foreachPartition``) that calls ``send(row)`` for each
    row of the partition once the limiter admitted it (``throttle_rows``: ``batch_rows`` at a time, in slices
    when the limit is small beside them), in the worker that holds the limiter: the sends themselves keep to
    the limit, and ``send`` may call ``report_outcome`` for an adaptive one."""
    if not callable(send):
        raise TypeError(f"send must be a function of one row, got {type(send).__name__}")
    _check_batch_rows(batch_rows)   # (here, on the driver: throttle_rows checks it only once a task runs)

    def each_partition(rows: Iterable[Any]) -> None:
        for row in throttle_rows(rows, topic, batch_rows=batch_rows, row_bytes=row_bytes, producer=producer,
                                 **producer_options):
            send(row)

    return each_partition


def throttle_foreach_batch(sink: Callable[[Any, int], None], topic: str, **producer_options: Any):
    """Wrap a ``foreachBatch`` sink so every micro-batch reaches it through the limiter (on the executors). The
    DataFrame ``sink`` gets is throttled as it is read: write it with a JVM writer (``.write...``); a sink that
    sends from Python wants ``batch_df.foreachPartition(throttle_foreach(topic, send))`` instead (see the module
    essay)."""

    def throttled_sink(batch_df: Any, batch_id: int) -> None:
        sink(batch_df.mapInArrow(throttle_arrow(topic, **producer_options), batch_df.schema), batch_id)

    return throttled_sink


def report_outcome(topic: str, outcome: Any, n: float = 1, retry_after_s: float | None = None,
                   latency_s: float | None = None) -> None:
    """In a task: ``n`` sends to ``topic``'s sink ended with ``outcome`` -- "ok", "throttled" (HTTP 429 or 503;
    ``retry_after_s``: its Retry-After) or "error" (a ``limiter.Outcome`` too); ``latency_s``: how long it took
    (a limit with ``adaptiveSlowMs`` takes a slower one for "too many"). A topic whose publish limit (or whose
    tenant's) is ``adaptive`` learns what the sink can take from every task's answers, and a Retry-After pauses
    every task on it; any other ignores it."""
    from .runtime import participant  # imported in the worker, not when Spark pickles the function

    participant().report_outcome(topic, outcome, n, retry_after_s, latency_s)


def _setting(builder: Any, key: str) -> str | None:
    if hasattr(builder, "_options"):        # SparkSession.Builder keeps its settings in a dict until getOrCreate
        return builder._options.get(key)
    return builder.get(key, None)           # SparkConf


def _application_id(builder: Any) -> str:
    """``<the application's name, as an id>-<8 random hex digits>`` (``spark`` when it has no name yet)."""
    name = _setting(builder, "spark.app.name")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", str(name or "")).strip("-._")[:48] or "spark"
    return f"{slug}-{secrets.token_hex(4)}"


def configure(builder: Any, url: str | None = None, token: str | None = None, *, ship: bool | None = None,
              **env: str) -> Any:
    """Pass the control plane's address and token (default: this process's environment) to every executor,
    ship the library to them, and make the Python workers run this interpreter. Works on a
    ``SparkSession.Builder`` or a ``SparkConf``.

    Without a THROTTLESCOPE_APP_ID (argument or environment), one is made from the application's name and a
    random suffix (``enrich-3f9a1c2e``) and set for the executors and this driver alike: Python workers cannot
    see Spark's application id, and without it every worker would report the application ``local``.

    ``ship`` (default: THROTTLESCOPE_SHIP_LIBRARY, on) adds the library's pure-Python packages to
    ``spark.files`` / ``spark.submit.pyFiles`` (``collectors.shipping``), so a cluster's nodes need no install of
    throttlescope; ``ship=False`` when their image has it already.

    It also turns on ``spark.python.udf.pipelined.enabled`` (Spark 4.3; unless set already), under which a Python
    worker hands each Arrow batch it yields to the JVM at once: otherwise it buffers 64 KB of output, and a writer
    in the JVM behind ``throttle_arrow`` got a task's rows in lumps -- 6,000 small rows paced at 500 a second over
    12 s reached Spark's parquet writer within one second (see the module essay)."""
    values = {name: os.environ[name] for name in _ENV_PASSED if os.environ.get(name)}
    if url:
        values["THROTTLESCOPE_URL"] = url
    if token:
        values["THROTTLESCOPE_TOKEN"] = token
    values.update(env)
    if not values.get("THROTTLESCOPE_APP_ID"):
        values["THROTTLESCOPE_APP_ID"] = os.environ["THROTTLESCOPE_APP_ID"] = _application_id(builder)
    setter = builder.config if hasattr(builder, "config") else builder.set
    if shipping_enabled(ship):
        ship_library(setter, lambda key: _setting(builder, key))
    for name, value in values.items():
        setter(f"spark.executorEnv.{name}", value)
    if _setting(builder, PIPELINED) is None:
        setter(PIPELINED, "true")
    # PySpark takes the workers' interpreter from PYSPARK_PYTHON in the driver's environment when the
    # SparkContext starts (``spark.pyspark.python`` only reaches spark-submit launched drivers): set both,
    # keeping an interpreter the user chose explicitly.
    python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    setter("spark.pyspark.python", python)
    setter("spark.pyspark.driver.python", sys.executable)
    return builder
