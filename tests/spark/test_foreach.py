"""``throttle_foreach``: a DataFrame's rows sent from Python, one request each, to a real HTTP server on loopback,
through a shared topic limit: the server itself sees the limit held and every row once.

The helper exists because the form that reads naturally, ``df.mapInArrow(throttle_arrow(t), schema).foreach(post)``,
runs ``post`` in another Python worker than the limiter, which Spark feeds pickled rows in lumps: the server got
1,300-1,490 rows a second under a limit of 500 (``collectors.spark``'s essay; the ``sends`` benchmark rows)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from benchmarks.shared.windows import worst_window_ratio
from tests.spark.conftest import ok

pytestmark = [pytest.mark.spark, pytest.mark.integration]

LIMIT_PER_S = 500
ROWS = 4000   # 8 s at the limit, in 2 tasks


class _Ids(BaseHTTPRequestHandler):
    seen: list[tuple[float, int]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        row = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            self.seen.append((time.time(), row["id"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


_CLIENTS: dict[str, httpx.Client] = {}   # one keep-alive client per Python worker


def _post_to(url: str) -> Any:
    def post(row: Any) -> None:
        client = _CLIENTS.get(url) or _CLIENTS.setdefault(url, httpx.Client(timeout=10))
        client.post(url, json={"id": row.id}).raise_for_status()
    return post


def test_rows_sent_by_throttle_foreach_reach_the_server_at_the_limit_each_once(spark: Any, admin: httpx.Client
                                                                                ) -> None:
    from collectors.spark import throttle_foreach

    topic = "foreach/web/api"
    ok(admin.post(f"/admin/v2/persistent/{topic}/publishRate", json={"publishThrottlingRateInMsg": LIMIT_PER_S}))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ids)
    server.daemon_threads = True
    _Ids.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ingest"
        df = spark.range(0, ROWS, numPartitions=2)
        df.foreachPartition(throttle_foreach(topic, _post_to(url)))
    finally:
        server.shutdown()
        server.server_close()
    seen = sorted(_Ids.seen)
    assert sorted(i for _, i in seen) == list(range(ROWS))              # every row, once
    t0, t1 = seen[0][0], seen[-1][0]
    events = [(t, 1.0) for t, _ in seen]
    worst = worst_window_ratio(events, LIMIT_PER_S, t0, t1)
    # the limit as the server saw it: one acquire of slack (a 40th of the limit's second) and this machine's noise
    assert worst <= 1.2 + 1 / 40, f"worst 1-s window {worst:.2f} x the limit"
    assert ROWS / (t1 - t0) >= 0.8 * LIMIT_PER_S, f"{ROWS / (t1 - t0):.0f} rows/s"   # and used


def test_throttle_foreach_refuses_a_send_that_is_not_a_function() -> None:
    from collectors.spark import throttle_foreach

    with pytest.raises(TypeError, match="send must be a function of one row"):
        throttle_foreach("a/b/c", "http://example.invalid")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_rows must be a whole number"):
        throttle_foreach("a/b/c", print, batch_rows=0)


_AT_MS = "cast(reflect('java.lang.System', 'currentTimeMillis') as bigint)"


def _written_at(spark: Any, out: str) -> tuple[list[int], list[tuple[float, float]]]:
    """The rows' values and, as events, when Spark's writer took each (its ``at_ms``)."""
    rows = spark.read.parquet(out).select("id", "at_ms").collect()
    return sorted(r.id for r in rows), sorted((r.at_ms / 1000.0, 1.0) for r in rows)


def test_a_jvm_writer_behind_throttle_arrow_takes_the_rows_at_the_limit(spark: Any, admin: httpx.Client,
                                                                        tmp_path: Any) -> None:
    # the rows' own clock as the writer takes them: reflect() is evaluated in the JVM for each row it writes. A
    # Python worker buffered 64 KB of its output before handing it on, so these 3,000 rows paced over 6 s reached
    # the writer within a second at the task's end; configure() turns on Spark's pipelined UDFs, batch by batch
    from pyspark.sql import functions as F

    from collectors.spark import PIPELINED, throttle_arrow

    assert spark.conf.get(PIPELINED) == "true"
    topic = "foreach/jvm/rows"
    ok(admin.post(f"/admin/v2/persistent/{topic}/publishRate", json={"publishThrottlingRateInMsg": LIMIT_PER_S}))
    out = str(tmp_path / "out")
    df = spark.range(0, 3000, numPartitions=2)
    df.mapInArrow(throttle_arrow(topic), df.schema).withColumn("at_ms", F.expr(_AT_MS)).write.parquet(out)
    ids, events = _written_at(spark, out)
    assert ids == list(range(3000))
    # from a second in: the limit's first window is granted whole as its tasks start (about 500 rows in the first
    # 0.1 s, then nothing until the window slides), and that lump and the steady rows after it jitter at the writer
    span_s = events[-1][0] - events[0][0]
    assert span_s >= 0.8 * (3000 - LIMIT_PER_S) / LIMIT_PER_S, f"the writer took every row within {span_s:.1f} s"
    worst = worst_window_ratio(events, LIMIT_PER_S, events[0][0] + 1.0, events[-1][0])
    assert worst <= 1.2 + 1 / 40, f"worst 1-s window {worst:.2f} x the limit"


def test_a_stream_through_throttle_foreach_batch_reaches_a_jvm_writer_at_the_limit(spark: Any, admin: httpx.Client,
                                                                                   tmp_path: Any) -> None:
    # a micro-batch worker's pool is granted what its task has in hand at once when the window has room (the gap
    # before it is caught up, not lost), so each micro-batch reaches the writer as a lump, about a second apart:
    # a 1-s window at the writer holds one lump and part of the next as their delivery jitters; two seconds hold it
    from pyspark.sql import functions as F

    from collectors.jobs.streaming import run_until
    from collectors.spark import throttle_foreach_batch

    topic = "foreach/stream/rows"
    ok(admin.post(f"/admin/v2/persistent/{topic}/publishRate", json={"publishThrottlingRateInMsg": LIMIT_PER_S}))
    out = str(tmp_path / "out")
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", LIMIT_PER_S)
              .option("numPartitions", 2).load())

    def write(batch_df: Any, batch_id: int) -> None:
        batch_df.withColumnRenamed("value", "id").withColumn("at_ms", F.expr(_AT_MS)).write.mode("append").parquet(out)

    def start(sink: Any) -> Any:
        return (source.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="0 seconds").start())

    run_until(spark, start, throttle_foreach_batch(write, topic), time.time() + 6.0, what="the throttled stream")
    ids, events = _written_at(spark, out)
    assert ids == list(range(len(ids))) and len(ids) >= 2 * LIMIT_PER_S, len(ids)   # each once, whole
    span_s = events[-1][0] - events[0][0]
    assert len(ids) / (span_s + 1.0) <= 1.2 * LIMIT_PER_S, f"{len(ids)} rows in {span_s:.1f} s"
    worst = worst_window_ratio(events, 2 * LIMIT_PER_S, events[0][0], events[-1][0])
    assert worst <= 1.25, f"worst 2-s window {worst:.2f} x the limit's"
