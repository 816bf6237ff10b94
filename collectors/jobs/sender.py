"""The publish job's task: several producers per task, each a thread, sending through the publish limiters.

How it works and why
--------------------
``send_partition(batches, settings)`` is the body of a ``mapInArrow`` task. It reads its partition (Arrow
record batches with ``id``, ``topic``, ``payload``), splits it into *streams* -- per topic, and within a topic
round robin over ``producers_per_topic`` keyed producers -- and gives every stream its own
``Producer`` from this worker's participant (named ``<topic>#p<partition>.<key>``) and its own thread. The
threads send concurrently: each takes ``batch_rows`` records, ``acquire``s them (msgs = records, bytes = the
sum of their payload sizes), and hands them to the sink. While any level -- broker, resource group, tenant,
namespace, topic -- holds a producer, its thread blocks in ``acquire`` on an event (no spinning) and nothing
is dropped: the records wait in memory. Producers of one tenant or resource group throttled together wait
in that level's FIFO fairness queue, so the queues have real members and take turns.

The partition is read whole before sending (a stream must not wait behind another stream's throttled
records); Spark partitions bound the memory. A deadline (``settings.deadline_at``) stops the threads: a blocked
``acquire`` times out at the deadline and the records not yet admitted are left unsent and counted as such.

While the threads run, the task samples the length of every fairness queue its producers are in (20 times a
second) and, at the end, how many throttle events each level recorded meanwhile. It yields one summary row
per stream (``kind="stream"``) and one per task (``kind="task"``, with those limiter figures as JSON).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .common import Deadline, ready_participant, task_info
from .sinks import make_sink

__all__ = ["SendSettings", "send_partition", "SUMMARY_SCHEMA", "SUMMARY_DDL", "MONITOR_INTERVAL_S", "BATCH_ROWS"]

MONITOR_INTERVAL_S = 0.05
# records per acquire by default. An acquire is charged whole, and a producer sends while its limiter holds any
# token, owing the rest (Pulsar's rule): each worker sharing a limit may run up to one acquire ahead, and the
# control plane, bounding every second's spends, holds the others back by as much. At 100 records a send -- a
# tenth of a 1,000 msgs/s limit -- the job's 4-task batch had a second at 1.18x its limit and its stream used
# 0.945 of it; at 25, 1.06x and 0.94-0.975 (a send costs microseconds of the limiter beside its delivery)
BATCH_ROWS = 25
SUMMARY_SCHEMA = pa.schema([
    ("kind", pa.string()), ("partition", pa.int32()), ("attempt", pa.int32()), ("participant", pa.string()),
    ("producer", pa.string()), ("topic", pa.string()), ("records_in", pa.int64()), ("records_out", pa.int64()),
    ("bytes_in", pa.int64()), ("bytes_out", pa.int64()), ("first_sent", pa.float64()),
    ("last_sent", pa.float64()), ("waited_s", pa.float64()), ("limiters", pa.string()),
])
_DDL_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint", pa.float64(): "double"}
SUMMARY_DDL = ", ".join(f"{f.name} {_DDL_TYPES[f.type]}" for f in SUMMARY_SCHEMA)  # for mapInArrow


@dataclass(frozen=True)
class SendSettings:
    out_dir: str
    sink: str = "files"
    batch_rows: int = BATCH_ROWS
    producers_per_topic: int = 2
    deadline_at: float = math.inf
    batch_id: int | None = None
    run_key: str = "run"
    ready_timeout_s: float = 10.0
    http_timeout_s: float = 10.0


@dataclass
class _Stream:
    topic: str
    key: int
    table: pa.Table
    producer: object = None
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    first_sent: float = math.nan
    last_sent: float = math.nan
    waited_s: float = 0.0
    error: BaseException | None = None
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _streams(table: pa.Table, keys: int) -> list[_Stream]:
    streams = []
    for topic in sorted(pc.unique(table.column("topic")).to_pylist()):
        rows = table.filter(pc.equal(table.column("topic"), topic))
        position = np.arange(rows.num_rows)
        for key in range(keys):
            part = rows.filter(pa.array(position % keys == key)) if keys > 1 else rows
            if part.num_rows:
                streams.append(_Stream(topic, key, part))
    for s in streams:
        if "payload" in s.table.column_names:
            s.lengths = pc.binary_length(s.table.column("payload")).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            s.lengths = np.zeros(s.table.num_rows, np.int64)
        s.bytes_in = int(s.lengths.sum())
    return streams


def _send(stream: _Stream, sink, settings: SendSettings, deadline: Deadline) -> None:
    producer = stream.producer
    try:
        for seq, offset in enumerate(range(0, stream.table.num_rows, settings.batch_rows)):
            chunk = stream.table.slice(offset, settings.batch_rows)
            nbytes = int(stream.lengths[offset:offset + chunk.num_rows].sum())
            timeout = deadline.timeout_s()
            if timeout == 0:
                return
            asked = time.time()
            if not producer.acquire(chunk.num_rows, nbytes, timeout_s=timeout):
                return  # the deadline passed while paused: the rest stays unsent
            sent = time.time()
            stream.waited_s += sent - asked
            sink.deliver(producer.name, stream.topic, chunk, sent, seq)
            if stream.records_out == 0:
                stream.first_sent = sent
            stream.last_sent = sent
            stream.records_out += chunk.num_rows
            stream.bytes_out += nbytes
    except BaseException as e:  # noqa: BLE001 - re-raised by the task after the other threads end
        stream.error = e


def _row(kind: str, task, participant: str, **values) -> dict:
    row = {"kind": kind, "partition": task.partition, "attempt": task.attempt, "participant": participant,
           "producer": "", "topic": "", "records_in": 0, "records_out": 0, "bytes_in": 0, "bytes_out": 0,
           "first_sent": math.nan, "last_sent": math.nan, "waited_s": 0.0, "limiters": ""}
    row.update(values)
    return row


def send_partition(batches: Iterator[pa.RecordBatch], settings: SendSettings) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of the publish job (see the module essay)."""
    task = task_info()
    batches = [b for b in batches if b.num_rows]
    if not batches:
        yield pa.RecordBatch.from_pylist([_row("task", task, "", limiters="{}")], SUMMARY_SCHEMA)
        return
    table = pa.Table.from_batches(batches)
    deadline = Deadline.until(settings.deadline_at)
    p = ready_participant(settings.ready_timeout_s)
    streams = _streams(table, settings.producers_per_topic)
    name = f"part-{task.partition:05d}.parquet"
    batch = "" if settings.batch_id is None else f"b{settings.batch_id}/"
    sink = make_sink(settings.sink, f"{settings.out_dir}/{name}", f"{settings.run_key}/{batch}p{task.partition}",
                     task.tag, settings.http_timeout_s, report=p.report_outcome)
    for s in streams:
        s.producer = p.producer(s.topic, f"{s.topic}#p{task.partition}.{s.key}")
    limiters = {(lim.level.value, lim.name): lim for s in streams for lim in s.producer.limiters}
    throttled_before = {k: lim.snapshot().throttled_count for k, lim in limiters.items()}
    max_queue = dict.fromkeys(limiters, 0)
    threads = [threading.Thread(target=_send, args=(s, sink, settings, deadline), daemon=True,
                                name=f"send-{s.producer.name}") for s in streams]
    for t in threads:
        t.start()
    while alive := [t for t in threads if t.is_alive()]:
        for key, lim in limiters.items():
            max_queue[key] = max(max_queue[key], lim.queue_length())
        # (a join, not a sleep: the task ends with its last thread -- a sleep held each micro-batch's end, and so
        # the next batch, up to one interval after its last send)
        alive[0].join(MONITOR_INTERVAL_S)
    errors = [s.error for s in streams if s.error is not None]
    if errors:
        sink.abort()
        raise errors[0]
    sink.close()
    stats = {f"{level}:{n}": {"max_queue": max_queue[(level, n)],
                              "throttled": lim.snapshot().throttled_count - throttled_before[(level, n)]}
             for (level, n), lim in limiters.items()}
    me = p.participant_id
    rows = [_row("stream", task, me, producer=s.producer.name, topic=s.topic, records_in=s.table.num_rows,
                 records_out=s.records_out, bytes_in=s.bytes_in, bytes_out=s.bytes_out, first_sent=s.first_sent,
                 last_sent=s.last_sent, waited_s=round(s.waited_s, 6)) for s in streams]
    rows.append(_row("task", task, me, limiters=json.dumps(stats)))
    yield pa.RecordBatch.from_pylist(rows, SUMMARY_SCHEMA)
