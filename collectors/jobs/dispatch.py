"""The dispatch job: read a backlog as subscriptions, dispatch-limited at broker, topic and subscription level.

How it works and why
--------------------
A backlog is a directory ``<backlog>/<tenant>/<namespace>/<topic>/partition-<k>.parquet`` (``make_backlog``
writes one): each file is one partition of a topic, each Parquet row group one *entry* (a batch of messages
``id``, ``payload``; ids count from 0 per partition). A topic with one partition is a non-partitioned topic
named ``tenant/namespace/topic``; with several, partition k is the topic ``tenant/namespace/topic-partition-k``
(Pulsar's naming: a partitioned topic's limits apply to each partition).

The driver lists the partitions and runs one Spark task per partition (``consumer.consume_partition``): one
dispatcher thread per subscription, reading from the subscription's cursor under every dispatch level of the
participant -- broker (``dispatchThrottlingRateIn*``), topic (topic > namespace ``dispatchRate`` > broker
default per topic), subscription (``subscriptionDispatchRate``, by the same precedence) and the namespace's
resource group -- with precise flow control and batch counting from the broker settings, unless the config
says otherwise. Delivered messages go to ``<output>/<subscription>/<topic>/segment-*.parquet`` (see
consumer.py for exactly-once); ``read_delivered(output)`` reads them back.

``duration_s`` bounds the run (None: until every subscription has read its backlog). The summary has records
(messages) in (the backlog ahead of the cursors) and out (delivered), entries, reads sent into backoff, and
per subscription the achieved message and entry rates and the reads each level throttled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from limiter.levels import split_topic

from .common import optional_positive, positive, summarize, visible_files
from .consumer import ConsumeSettings, consume_partition

__all__ = ["DispatchConfig", "run_dispatch", "make_backlog", "list_backlog", "read_delivered"]


@dataclass(frozen=True)
class DispatchConfig:
    backlog: str
    output: str
    subscriptions: tuple[str, ...] = ("sub",)
    duration_s: float | None = 30.0
    permits: int = 1000                 # the consumers' receiver queue (flow permits)
    read_batch_size: int = 100          # dispatcherMaxReadBatchSize
    precise: bool | None = None         # preciseDispatcherFlowControl; None: the broker setting
    count_entries: bool | None = None   # dispatchThrottlingOnBatchMessageEnabled; None: the broker setting
    backoff_s: float = 0.05             # retry delay of a throttled read (Pulsar's 1 s wastes most of a period)
    ready_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.subscriptions or any(not s or "/" in s for s in self.subscriptions):
            raise ValueError(f"subscriptions must be names without '/', got {self.subscriptions!r}")
        if len(set(self.subscriptions)) != len(self.subscriptions):
            raise ValueError(f"subscriptions must be distinct, got {self.subscriptions!r}")
        optional_positive("duration_s", self.duration_s)
        positive("permits", self.permits, integer=True)
        positive("read_batch_size", self.read_batch_size, integer=True)
        positive("backoff_s", self.backoff_s)
        if self.precise and self.count_entries:
            raise ValueError("precise flow control and batch counting are mutually exclusive (as in Pulsar)")


def make_backlog(path: str | Path, topics: Mapping[str, int], entries: int, msgs_per_entry: int = 10,
                 payload_bytes: int = 100) -> int:
    """Write ``entries`` entries to each of ``topics[topic]`` partitions of each topic. Entries hold 1 to
    ``2 * msgs_per_entry - 1`` messages, each size once per cycle in a shuffled order (so the average is
    ``msgs_per_entry``). Returns the messages per partition."""
    import random

    positive("entries", entries, integer=True)
    positive("msgs_per_entry", msgs_per_entry, integer=True)
    cycle = list(range(1, 2 * msgs_per_entry))
    random.Random(entries).shuffle(cycle)
    sizes = [cycle[i % len(cycle)] for i in range(entries)]
    filler = "." * max(0, payload_bytes - 12)
    for topic, partitions in topics.items():
        tenant, namespace, name = split_topic(topic)
        directory = Path(path, tenant, namespace.split("/")[1], name.split("/")[2])
        directory.mkdir(parents=True, exist_ok=True)
        for k in range(positive("partitions", partitions, integer=True)):
            schema = pa.schema([("id", pa.int64()), ("entry", pa.int32()), ("payload", pa.string())])
            with pq.ParquetWriter(directory / f"partition-{k}.parquet", schema) as writer:
                first = 0
                for e, size in enumerate(sizes):
                    ids = list(range(first, first + size))
                    writer.write_table(pa.table({"id": ids, "entry": [e] * size,
                                                 "payload": [f"{i:012d}{filler}" for i in ids]}, schema))
                    first += size
    return sum(sizes)


def list_backlog(backlog: str | Path) -> list[dict[str, str]]:
    """Every partition of the backlog: ``{"topic": name for the limiters, "path": file}``."""
    root = Path(backlog)
    if not root.is_dir():
        raise ValueError(f"the backlog {str(root)!r} is not a directory")
    items = []
    for topic_dir in sorted(p for p in root.glob("*/*/*") if p.is_dir()):
        files = visible_files(topic_dir, "partition-*.parquet")
        base = "/".join(topic_dir.relative_to(root).parts)
        for f in files:
            k = f.stem.removeprefix("partition-")
            items.append({"topic": base if len(files) == 1 else f"{base}-partition-{k}", "path": str(f)})
    if not items:
        raise ValueError(f"the backlog {str(root)!r} has no <tenant>/<namespace>/<topic>/partition-<k>.parquet")
    return items


def read_delivered(output: str | Path) -> pa.Table:
    """Every delivered message: its columns plus ``subscription`` and ``topic``."""
    tables = []
    for seg in sorted(Path(output).glob("*/*/*/*/segment-*.parquet")):
        if seg.name.startswith((".", "_")):
            continue
        rel = seg.parent.relative_to(output).parts
        t = pq.read_table(seg)
        t = t.append_column("subscription", pa.array([rel[0]] * t.num_rows, pa.string()))
        tables.append(t.append_column("topic", pa.array(["/".join(rel[1:])] * t.num_rows, pa.string())))
    return pa.concat_tables(tables) if tables else pa.table({"id": pa.array([], pa.int64())})


def run_dispatch(spark: Any, config: DispatchConfig) -> dict[str, Any]:
    """Run the dispatch job on ``spark``; returns its summary."""
    items = list_backlog(config.backlog)
    started = time.time()
    deadline_at = float("inf") if config.duration_s is None else started + config.duration_s
    settings = ConsumeSettings(config.output, tuple(config.subscriptions), config.permits, config.read_batch_size,
                               config.precise, config.count_entries, config.backoff_s, deadline_at,
                               config.ready_timeout_s)
    rdd = spark.sparkContext.parallelize(items, len(items))
    rows = rdd.mapPartitions(lambda it: consume_partition(it, settings)).collect()
    ended = time.time()
    subs: dict[str, dict[str, Any]] = {}
    throttled: dict[str, int] = {}
    for r in rows:
        key = f"{r['subscription']}@{r['topic']}"
        span = r["last"] - r["first"] if r["reads"] > 1 else 0.0
        subs[key] = {"msgs": r["msgs"], "entries": r["entries"], "bytes": r["bytes"], "reads": r["reads"],
                     "backoffs": r["backoffs"], "cursor": [r["cursor_start"], r["cursor_end"]],
                     "backlog_entries": r["backlog_entries"], "precise": r["precise"],
                     "count_entries": r["count_entries"],
                     "msgs_per_s": round(r["msgs"] / span, 1) if span > 0 else None,
                     "entries_per_s": round(r["entries"] / span, 2) if span > 0 else None}
        for level, n in r["throttled"].items():
            throttled[level] = throttled.get(level, 0) + n
    return summarize("dispatch", records_in=sum(r["backlog_msgs"] for r in rows),
                     records_out=sum(r["msgs"] for r in rows), bytes_in=None,
                     bytes_out=sum(r["bytes"] for r in rows), started_s=started, ended_s=ended, unit="messages",
                     entries_out=sum(r["entries"] for r in rows), partitions=len(items),
                     participants=len({r["participant"] for r in rows}),
                     subscriptions=subs, throttled_reads=throttled, config=asdict(config))
