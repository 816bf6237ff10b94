"""The publish job: a multi-tenant workload sent through the publish limiters to a sink.

How it works and why
--------------------
Records (``id``, ``topic`` = ``tenant/namespace/topic``, ``payload``) come from one of two sources:

- ``files`` (batch): a Parquet dataset (``make_input`` writes one), read by Spark and repartitioned to
  ``partitions`` tasks; every record is sent once, unless ``duration_s`` runs out first (the rest is counted
  as not sent). The output directory's earlier ``part-*`` files are replaced.
- ``rate`` (streaming): Spark's ``rate-micro-batch`` source -- ``rows_per_batch`` rows per trigger, ids
  0, 1, 2, ... spread over ``topics`` round robin (or in the proportions ``topic_weights`` gives: a micro-batch
  ends when its slowest topic is sent, so equal parts under unequal limits leave every other topic idle for the
  rest of it, throttled at the start of each batch and far below its limit on average) -- for ``duration_s``
  seconds, through ``foreachBatch``. Not the time-driven ``rate`` source: behind a throttled sink its batches
  would grow without bound; with a fixed number of rows per trigger the input follows the sink's pace
  (backpressure). Each micro-batch writes ``batch-<id>/`` and then a ``_COMMITTED`` marker. The micro-batches
  run back to back (``streaming.run_until``: no restart of the query between them, which cost ~0.4 s of idle
  limit per batch); the first one that starts after ``duration_s`` ends the query uncommitted, so the run may
  last one micro-batch longer and a stop never interrupts a running batch. A rerun with the same output
  continues from the checkpoint; a ``batch-*`` directory without its marker (a crash) is removed.

Each task (``sender.send_partition``) runs several producers concurrently -- one thread per topic and key --
under every level the control plane limits (broker, resource group, tenant, namespace default per topic,
topic), so several levels throttle at once and the fairness queues have real members. The sink is files
(``<output>/part-<partition>.parquet``, atomically per task) or an HTTP endpoint (``sink="http://..."``, see
sinks.py). ``read_output(output)`` reads what was delivered (committed files only).

The summary: records and payload bytes in (read) and out (sent), elapsed time and rates, per tenant and per
topic, and per limiter the longest fairness queue seen and the number of throttle events.
"""

from __future__ import annotations

import math
import secrets
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from limiter.levels import split_topic

from .common import atomic_write_text, optional_positive, positive, summarize, visible_files
from .sender import BATCH_ROWS, SUMMARY_DDL, SendSettings, send_partition
from .streaming import run_until

__all__ = ["PublishConfig", "run_publish", "make_input", "read_output", "DEMO_TOPICS"]

DEMO_TOPICS = ("acme/web/clicks", "acme/web/views", "acme/ops/logs", "globex/etl/orders", "globex/etl/payments",
               "initech/data/blobs")
COMMITTED = "_COMMITTED"


@dataclass(frozen=True)
class PublishConfig:
    output: str
    source: str = "rate"                  # "rate" (streaming) or "files" (batch)
    input: str | None = None              # the Parquet dataset for source="files"
    topics: tuple[str, ...] = DEMO_TOPICS  # source="rate": records go round robin to these
    sink: str = "files"                   # "files" or an http(s):// URL
    duration_s: float | None = 20.0       # rate: how long to run; files: an upper bound (None: none)
    partitions: int | None = None         # tasks (default: Spark's default parallelism)
    rows_per_batch: int = 2000            # rate: rows per micro-batch
    payload_bytes: int = 200              # rate: payload size
    producers_per_topic: int = 2          # keyed producers (threads) per topic per task
    batch_rows: int = BATCH_ROWS          # records per acquire (accounting is per batch; see sender.BATCH_ROWS)
    ready_timeout_s: float = 10.0
    http_timeout_s: float = 10.0
    topic_weights: tuple[int, ...] | None = None   # rate: records per topic in these proportions (None: equal)

    def __post_init__(self) -> None:
        if self.source not in ("rate", "files"):
            raise ValueError(f"source must be 'rate' or 'files', got {self.source!r}")
        if self.source == "files" and not self.input:
            raise ValueError("source 'files' needs an input dataset (--input, input=...)")
        if self.source == "rate" and self.duration_s is None:
            raise ValueError("source 'rate' needs a duration_s (a stream has no end of its own)")
        if self.sink != "files" and not self.sink.startswith(("http://", "https://")):
            raise ValueError(f"sink must be 'files' or an http(s):// URL, got {self.sink!r}")
        if not self.topics:
            raise ValueError("topics must name at least one tenant/namespace/topic")
        for topic in self.topics:
            split_topic(topic)
        optional_positive("duration_s", self.duration_s)
        optional_positive("partitions", self.partitions, integer=True)
        for name in ("rows_per_batch", "producers_per_topic", "batch_rows"):
            positive(name, getattr(self, name), integer=True)
        positive("payload_bytes", self.payload_bytes, integer=True)
        if self.topic_weights is not None:
            if len(self.topic_weights) != len(self.topics):
                raise ValueError(f"topic_weights must give one whole number > 0 per topic ({len(self.topics)}), "
                                 f"got {len(self.topic_weights)}: {self.topic_weights!r}")
            for weight in self.topic_weights:
                positive("topic_weights", weight, integer=True)

    def topic_cycle(self) -> tuple[str, ...]:
        """The topics of ids 0, 1, 2, ... of the rate source, repeating: each topic its weight times in a row,
        the weights divided by their greatest common divisor (limits such as 150 and 250 give a cycle of 8)."""
        weights = self.topic_weights or (1,) * len(self.topics)
        unit = math.gcd(*weights)
        return tuple(topic for topic, weight in zip(self.topics, weights, strict=True) for _ in range(weight // unit))


def make_input(path: str | Path, counts: Mapping[str, int], files: int = 2, payload_bytes: int = 200) -> int:
    """Write a Parquet dataset of ``counts[topic]`` records per topic in ``files`` files, topics interleaved
    (so every file -- every task -- holds every topic); ids 0..N-1. Returns N."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    rounds: list[int] = []
    remaining = dict(counts)
    while any(remaining.values()):  # round robin over the topics until each has its count
        for topic in counts:
            if remaining[topic]:
                remaining[topic] -= 1
                names.append(topic)
                rounds.append(counts[topic] - remaining[topic])
    ids = list(range(len(names)))
    filler = "." * max(0, payload_bytes - 12)
    table = pa.table({"id": pa.array(ids, pa.int64()), "topic": pa.array(names, pa.string()),
                      "payload": pa.array([f"{i:012d}{filler}" for i in ids], pa.string())})
    for f in range(files):  # round r of every topic goes to file r % files
        pq.write_table(table.filter(pa.array([r % files == f for r in rounds], pa.bool_())),
                       path / f"input-{f:05d}.parquet")
    return len(ids)


def read_output(output: str | Path) -> pa.Table:
    """The records delivered to a files sink: ``part-*`` files, and committed micro-batches."""
    output = Path(output)
    files = visible_files(output, "part-*.parquet")
    for batch in sorted(output.glob("batch-*")):
        if (batch / COMMITTED).exists():
            files += visible_files(batch, "part-*.parquet")
    tables = [pq.read_table(f) for f in files]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({"id": pa.array([], pa.int64())})


def _settings(config: PublishConfig, out_dir: Path, deadline_at: float, batch_id: int | None,
              run_key: str) -> SendSettings:
    return SendSettings(str(out_dir), config.sink, config.batch_rows, config.producers_per_topic, deadline_at,
                        batch_id, run_key, config.ready_timeout_s, config.http_timeout_s)


def _run_files(spark: Any, config: PublishConfig, out: Path, started: float, run_key: str) -> list[Any]:
    for old in visible_files(out, "part-*.parquet"):
        old.unlink()
    df = spark.read.parquet(config.input)
    df = df.repartition(config.partitions or spark.sparkContext.defaultParallelism)
    deadline_at = float("inf") if config.duration_s is None else started + config.duration_s
    settings = _settings(config, out, deadline_at, None, run_key)
    return df.mapInArrow(lambda it: send_partition(it, settings), SUMMARY_DDL).collect()


def _run_rate(spark: Any, config: PublishConfig, out: Path, run_key: str) -> tuple[list[Any], int]:
    from pyspark.sql import functions as F

    parts = config.partitions or spark.sparkContext.defaultParallelism
    cycle = config.topic_cycle()
    topics = F.array(*[F.lit(t) for t in cycle])
    filler = F.lit("." * max(0, config.payload_bytes - 12))
    stream = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", config.rows_per_batch)
              .option("numPartitions", parts).load()
              .select(F.col("value").alias("id"),
                      F.element_at(topics, (F.col("value") % len(cycle) + 1).cast("int")).alias("topic"),
                      F.concat(F.lpad(F.col("value").cast("string"), 12, "0"), filler).alias("payload")))
    rows: list[Any] = []
    committed = [0]

    def each_batch(batch_df: Any, batch_id: int) -> None:
        batch_dir = out / f"batch-{batch_id:06d}"
        settings = _settings(config, batch_dir, float("inf"), batch_id, run_key)
        got = batch_df.mapInArrow(lambda it: send_partition(it, settings), SUMMARY_DDL).collect()
        atomic_write_text(batch_dir / COMMITTED, f"{sum(r.records_out for r in got)}\n")
        rows.extend(got)
        committed[0] += 1

    def start(sink: Any) -> Any:
        return (stream.writeStream.foreachBatch(sink).trigger(processingTime="0 seconds")
                .option("checkpointLocation", str(out / "_checkpoint"))
                .queryName(f"throttlescope-publish-{run_key}").start())

    run_until(spark, start, each_batch, time.time() + config.duration_s, what="the publish stream")
    for batch in out.glob("batch-*"):
        if not (batch / COMMITTED).exists():
            shutil.rmtree(batch, ignore_errors=True)  # left by a crash: Spark replays it on the next run
    return rows, committed[0]


def run_publish(spark: Any, config: PublishConfig) -> dict[str, Any]:
    """Run the publish job on ``spark``; returns (and does not print) its summary."""
    out = Path(config.output)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    # (the query's name and the HTTP sink's idempotency keys: unique even for runs started in the same ms on
    # several driver threads, as the demo's streams are)
    run_key = f"{int(started * 1000):x}-{secrets.token_hex(3)}"
    batches = None
    if config.source == "files":
        rows = _run_files(spark, config, out, started, run_key)
    else:
        rows, batches = _run_rate(spark, config, out, run_key)
    ended = time.time()
    return _summary(config, rows, started, ended, batches)


def _summary(config: PublishConfig, rows: list[Any], started: float, ended: float,
             batches: int | None) -> dict[str, Any]:
    import json

    streams = [r for r in rows if r.kind == "stream"]
    sent = [r for r in streams if r.records_out]
    t0 = min((r.first_sent for r in sent), default=started)
    t1 = max((r.last_sent for r in sent), default=ended)
    span = max(1e-9, t1 - t0)
    by: dict[str, dict[str, dict[str, float]]] = {"tenant": {}, "topic": {}}
    for r in streams:
        tenant = split_topic(r.topic)[0]
        for kind, name in (("tenant", tenant), ("topic", r.topic)):
            agg = by[kind].setdefault(name, {"records_out": 0, "bytes_out": 0, "records_in": 0})
            agg["records_out"] += r.records_out
            agg["bytes_out"] += r.bytes_out
            agg["records_in"] += r.records_in
    for group in by.values():
        for agg in group.values():
            agg["records_out_per_s"] = round(agg["records_out"] / span, 1)
    limiters: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.kind == "task" and r.limiters:
            for key, stat in json.loads(r.limiters).items():
                agg = limiters.setdefault(key, {"max_queue": 0, "throttled": 0})
                agg["max_queue"] = max(agg["max_queue"], stat["max_queue"])
                agg["throttled"] += stat["throttled"]
    extra: dict[str, Any] = {"source": config.source, "sink": config.sink, "output": config.output,
                             "tasks": sum(1 for r in rows if r.kind == "task"),
                             "producers": len(streams), "participants": len({r.participant for r in sent}),
                             "send_window_s": round(span, 3), "not_sent": sum(r.records_in - r.records_out
                                                                               for r in streams)}
    if batches is not None:
        extra["micro_batches"] = batches
    return summarize("publish", records_in=sum(r.records_in for r in streams),
                     records_out=sum(r.records_out for r in streams), bytes_in=sum(r.bytes_in for r in streams),
                     bytes_out=sum(r.bytes_out for r in streams), started_s=started, ended_s=ended, **extra,
                     tenants=by["tenant"], topics=by["topic"], limiters=limiters,
                     config={k: v for k, v in asdict(config).items() if k != "topics"})
