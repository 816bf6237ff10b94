"""The dispatch job's task: one topic partition, one thread (dispatcher) per subscription.

How it works and why
--------------------
A backlog partition is a Parquet file whose row groups are *entries* (a batch of messages, as a Pulsar ledger
entry holds a batch). ``consume_partition(items, settings)`` runs, for each partition handed to the task, one
thread per subscription. Each thread is that subscription's dispatcher on the partition
(``participant().dispatcher(topic, subscription)``: under the broker, topic and subscription limiters, and the
resource group's) and loops, as Pulsar's dispatcher does:

1. ``plan = dispatcher.plan_read(permits)`` -- how many entries to read: at most the read batch size, shrunk
   to what every level has left (entries from message permits by the average messages per entry with precise
   flow control; entries themselves with batch counting). The plan reserves its estimate on every level.
2. No entries: a level is out of permits -- back off ``backoff_s`` (a short sleep, not a spin) and retry.
3. Read that many entries (row groups) from the cursor -- with precise flow control cut to the message
   permits the plan found (``max_msgs``, the consumers' permits, the read batch size; at least one entry):
   the backlog's metadata gives every entry's message count before reading, so the read need not guess from
   the average (which a dispatcher does not know before its first read; Pulsar #4777) --, *deliver* them (to the subscription's output), and
   ``dispatcher.charge(msgs, bytes, entries, plan)`` -- what was really sent settles the reservation.

The consumer acknowledges at once, so its permits stay at ``permits`` (the receiver queue). The cursor (next
entry) starts where the subscription's ``cursor.json`` says and is stored after the delivered messages: each
run writes one segment ``segment-<first entry>.parquet`` (atomically), then the cursor. A retried task or a
rerun after a crash between the two rewrites the same segment name: every message is delivered exactly once.
A deadline stops the loop before the next plan; what is left stays backlog for the next run.

Delivered rows carry ``delivered_at`` (wall time), ``read`` (the read's number) and ``waited`` (the read came
right after a backoff -- with limits refilled once per period, right after a period boundary), from which
tests measure the steady rate (``common.steady_rate``).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .common import Deadline, atomic_write_table, atomic_write_text, ready_participant, task_info

__all__ = ["ConsumeSettings", "consume_partition", "cursor_dir", "read_cursor"]


@dataclass(frozen=True)
class ConsumeSettings:
    output: str
    subscriptions: tuple[str, ...]
    permits: int = 1000
    read_batch_size: int = 100
    precise: bool | None = None        # None: the broker setting (preciseDispatcherFlowControl)
    count_entries: bool | None = None  # None: the broker setting (dispatchThrottlingOnBatchMessageEnabled)
    backoff_s: float = 0.05
    deadline_at: float = math.inf
    ready_timeout_s: float = 10.0

    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"dispatcher_max_read_batch_size": self.read_batch_size, "backoff_s": self.backoff_s}
        if self.precise is not None:
            opts["precise_dispatcher_flow_control"] = self.precise
        if self.count_entries is not None:
            opts["dispatch_throttling_on_batch_message"] = self.count_entries
        return opts


def cursor_dir(output: str | Path, subscription: str, topic: str) -> Path:
    return Path(output) / subscription / topic


def read_cursor(output: str | Path, subscription: str, topic: str) -> int:
    path = cursor_dir(output, subscription, topic) / "cursor.json"
    return int(json.loads(path.read_text())["entry"]) if path.exists() else 0


def _consume(p: Any, sub: str, item: dict, settings: ConsumeSettings, deadline: Deadline, tag: str,
             result: dict) -> None:
    try:
        topic = item["topic"]
        dispatcher = p.dispatcher(topic, sub, **settings.options())
        result.update(precise=dispatcher.precise, count_entries=dispatcher.count_entries,
                      throttled_before={f"{lim.level.value}:{lim.name}": lim.throttled_count
                                        for lim in dispatcher.levels})
        source = pq.ParquetFile(item["path"])
        total = source.num_row_groups
        sizes = [source.metadata.row_group(i).num_rows for i in range(total)]
        start = cursor = read_cursor(settings.output, sub, topic)
        parts: list[pa.Table] = []
        waited, reads = False, 0
        while cursor < total and not deadline.passed():
            plan = dispatcher.plan_read(settings.permits)
            if plan.entries == 0:
                waited = True
                result["backoffs"] += 1
                time.sleep(max(0.0, min(plan.backoff_s or settings.backoff_s, deadline.remaining_s())))
                continue
            count = _entries_to_read(plan, sizes, cursor, dispatcher, settings)
            table = source.read_row_groups(list(range(cursor, cursor + count)))
            now = time.time()
            nbytes = _payload_bytes(table)
            n = table.num_rows
            table = table.append_column("delivered_at", pa.array([now] * n, pa.float64()))
            table = table.append_column("read", pa.array([reads] * n, pa.int32()))
            parts.append(table.append_column("waited", pa.array([waited] * n, pa.bool_())))
            dispatcher.charge(n, nbytes, count, plan)
            result["msgs"] += n
            result["bytes"] += nbytes
            result["entries"] += count
            result["first"] = min(result["first"], now)
            result["last"] = max(result["last"], now)
            cursor += count
            reads += 1
            waited = False
        directory = cursor_dir(settings.output, sub, topic)
        if parts:
            atomic_write_table(pa.concat_tables(parts), directory / f"segment-{start:08d}.parquet", tag)
            atomic_write_text(directory / "cursor.json", json.dumps({"entry": cursor}), tag)
        result.update(cursor_start=start, cursor_end=cursor, backlog_entries=total, reads=reads,
                      backlog_msgs=_msgs_from(source, start),
                      throttled={f"{lim.level.value}:{lim.name}": lim.throttled_count for lim in dispatcher.levels})
    except BaseException as e:  # noqa: BLE001 - re-raised by the task after the other threads end
        result["error"] = e


def _payload_bytes(table: pa.Table) -> int:
    return int(pc.sum(pc.binary_length(table.column("payload"))).as_py() or 0) \
        if "payload" in table.column_names else 0


def _entries_to_read(plan: Any, sizes: list[int], cursor: int, dispatcher: Any, settings: ConsumeSettings) -> int:
    count = min(plan.entries, len(sizes) - cursor)
    if not dispatcher.precise or dispatcher.count_entries:
        return count  # as planned (without precise flow control a read may overshoot: Pulsar's behaviour)
    budget = min(plan.max_msgs, settings.permits, settings.read_batch_size)
    taken, msgs = 1, sizes[cursor]
    while taken < count and msgs + sizes[cursor + taken] <= budget:
        msgs += sizes[cursor + taken]
        taken += 1
    return taken


def _msgs_from(source: pq.ParquetFile, start: int) -> int:
    meta = source.metadata
    return sum(meta.row_group(i).num_rows for i in range(start, meta.num_row_groups))


def consume_partition(items: Iterable[dict], settings: ConsumeSettings) -> Iterator[dict]:
    """The ``mapPartitions`` body of the dispatch job (see the module essay): one dict per (subscription,
    partition) with what was delivered."""
    task = task_info()
    deadline = Deadline.until(settings.deadline_at)
    # the first call of a compute kernel costs a fresh Python worker about 0.4 s: paid here, before any
    # dispatcher exists -- in the first read, its pools would sit idle that long and give their tokens back
    _payload_bytes(pa.table({"payload": pa.array([b""])}))
    p = ready_participant(settings.ready_timeout_s)
    for item in items:
        results = [{"subscription": sub, "topic": item["topic"], "participant": p.participant_id,
                    "partition": task.partition, "msgs": 0, "bytes": 0, "entries": 0, "backoffs": 0,
                    "first": math.inf, "last": -math.inf, "error": None} for sub in settings.subscriptions]
        threads = [threading.Thread(target=_consume, args=(p, r["subscription"], item, settings, deadline,
                                                           task.tag, r), daemon=True)
                   for r in results]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            if r["error"] is not None:
                raise r.pop("error")
        for r in results:
            r.pop("error")
            before = r.pop("throttled_before")
            r["throttled"] = {k: v - before.get(k, 0) for k, v in r["throttled"].items()}
            yield r
