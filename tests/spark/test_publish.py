"""The publish job on the session's SparkSession against the live control plane.

Rates are measured from the sink's own records (``sent_at`` of every record) over a window that excludes the
start: it opens ``WARMUP_S`` after the first send -- past the initial full buckets (each participant's share
of a shared limit starts with up to one report interval of tokens, and until the first usage map arrives every
participant takes the whole limit) -- and closes when the first producer of the measured group runs out of
input (after that the group no longer saturates its limit).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from benchmarks.shared.windows import worst_window_ratio
from collectors.jobs import PublishConfig, make_input, read_output, run_publish
from collectors.jobs.common import rate_between
from tests.spark.conftest import ok, used_and_held

pytestmark = [pytest.mark.spark, pytest.mark.integration]

WARMUP_S = 1.5
SECONDS = 8  # of throttled sending per stream (the measured span ends when the first producer of a level is done:
#             on a loaded CI machine that came 2.3 s early, and 6 s left 1.74 s to measure)


def window_rate(frame: pd.DataFrame, start: float, column: str | None = None) -> tuple[float, float]:
    end = frame.groupby("producer").sent_at.max().min()
    amounts = frame[column] if column else [1] * len(frame)
    return rate_between(list(frame.sent_at), list(amounts), start + WARMUP_S, end), end - start - WARMUP_S


def test_publish_multi_tenant_rates_fairness_and_exactly_once(spark, admin, broker_settings, tmp_path: Path):
    # limits at several levels at once: tenant (acme), topic (acme/ops/logs, a bytes limit on initech's blobs),
    # resource group (rg-etl over globex/etl, with the namespace's per-topic default above it), broker
    ok(admin.post("/admin/v2/tenants/acme/publishRate", json={"publishThrottlingRateInMsg": 3000}))
    ok(admin.post("/admin/v2/persistent/acme/ops/logs/publishRate", json={"publishThrottlingRateInMsg": 500}))
    ok(admin.put("/admin/v2/resourcegroups/rg-etl", json={"publishRateInMsgs": 1500}))
    ok(admin.post("/admin/v2/namespaces/globex/etl/resourcegroup/rg-etl"))
    ok(admin.post("/admin/v2/namespaces/globex/etl/publishRate", json={"publishThrottlingRateInMsg": 1000}))
    ok(admin.post("/admin/v2/persistent/initech/data/blobs/publishRate", json={"publishThrottlingRateInByte": 200_000}))
    broker_settings("brokerPublishThrottlingMaxMessageRate", 100_000)
    counts = {"acme/web/clicks": 1250 * SECONDS, "acme/web/views": 1250 * SECONDS, "acme/ops/logs": 500 * SECONDS,
              "globex/etl/orders": 750 * SECONDS, "globex/etl/payments": 750 * SECONDS,
              "initech/data/blobs": 500 * SECONDS}
    total = make_input(tmp_path / "in", counts, files=2, payload_bytes=400)

    summary = run_publish(spark, PublishConfig(output=str(tmp_path / "out"), source="files", input=str(tmp_path / "in"),
                                               duration_s=60, partitions=2, producers_per_topic=2, batch_rows=20))

    # every record delivered exactly once: nothing dropped by throttling, nothing duplicated
    sent = read_output(tmp_path / "out").to_pandas()
    expected = pq.read_table(tmp_path / "in").column("id").to_pylist()
    assert sorted(sent.id) == sorted(expected) and len(expected) == total
    assert summary["records_in"] == summary["records_out"] == total and summary["not_sent"] == 0
    assert summary["participants"] == 2 and summary["producers"] == 2 * 2 * len(counts)

    sent["tenant"] = sent.topic.str.split("/").str[0]
    sent["bytes"] = sent.payload.str.len()
    start = sent.sent_at.min()
    measured = {
        "tenant acme (msgs/s)": (window_rate(sent[sent.tenant == "acme"], start), 3000),
        "topic acme/ops/logs (msgs/s)": (window_rate(sent[sent.topic == "acme/ops/logs"], start), 500),
        "resource group rg-etl (msgs/s)": (window_rate(sent[sent.tenant == "globex"], start), 1500),
        "topic initech/data/blobs (bytes/s)": (window_rate(sent[sent.tenant == "initech"], start, "bytes"), 200_000),
    }
    for name, ((rate, window), limit) in measured.items():
        assert window >= 2.5, f"{name}: measured over {window:.2f} s only"
        assert used_and_held(rate, limit), f"{name}: {rate:.1f} against a limit of {limit} ({measured})"

    # fairness: producers throttled by the same level take turns in its FIFO queue (within 30 % of their mean: the
    # two topics' producers are threads of two Python workers sharing two cores with the JVM, the sink and the
    # control plane, and one starved of the GIL for a moment falls behind. 10 runs here: both pairs 0.00-0.14 apart;
    # in CI once 1,032 vs 1,333 (0.25); a broken queue is 1:2 or worse, 0.67)
    for a, b in (("acme/web/clicks", "acme/web/views"), ("globex/etl/orders", "globex/etl/payments")):
        ra = window_rate(sent[sent.topic == a], start)[0]
        rb = window_rate(sent[sent.topic == b], start)[0]
        assert abs(ra - rb) <= 0.3 * (ra + rb) / 2, f"{a} {ra:.0f}/s vs {b} {rb:.0f}/s"
    limiters = summary["limiters"]
    for level in ("tenant:acme", "topic:acme/ops/logs", "resource_group:rg-etl", "topic:initech/data/blobs"):
        assert limiters[level]["throttled"] > 0, (level, limiters)
    for level in ("tenant:acme", "resource_group:rg-etl"):  # several producers queued at once
        assert limiters[level]["max_queue"] >= 2, (level, limiters)
    assert limiters["broker:broker"]["throttled"] == 0


def test_publish_rate_source_stream_is_exactly_once_across_runs(spark, admin, tmp_path: Path):
    ok(admin.post("/admin/v2/tenants/stream/publishRate", json={"publishThrottlingRateInMsg": 2000}))
    topics = ("stream/live/a", "stream/live/b")
    config = PublishConfig(output=str(tmp_path / "out"), source="rate", topics=topics, duration_s=3,
                           rows_per_batch=2000, partitions=2, batch_rows=50)
    first = run_publish(spark, config)
    second = run_publish(spark, config)  # continues from the checkpoint

    ids = sorted(read_output(tmp_path / "out").column("id").to_pylist())
    batches = first["micro_batches"] + second["micro_batches"]
    assert first["micro_batches"] >= 1 and second["micro_batches"] >= 1
    assert ids == list(range(batches * 2000))  # the rate source's ids: none lost, none twice
    assert first["records_out"] + second["records_out"] == len(ids)
    sent = read_output(tmp_path / "out").to_pandas()
    assert set(sent.topic) == set(topics)
    # no second above the tenant limit once the first run's initial buckets are spent. Not a mean from the first
    # send to the last: each micro-batch may start on a bucket refilled while Spark planned it (up to one period
    # of the share: Pulsar's semantics), so a span ending on a batch's last send counts one batch with no time
    # for it -- 6,000 records of three batches in 2.8 s read as 2,140/s while no 1-s window held more than 2,000
    start = sent.sent_at.min()
    events = [(t, 1.0) for t in sorted(sent.sent_at)]
    worst = worst_window_ratio(events, 2000, start + WARMUP_S, events[-1][0])
    per_quarter = ((sent.sent_at - start) // 0.25 / 4).value_counts().sort_index().to_dict()
    assert worst <= 1.2 + config.batch_rows / 2000, f"worst 1-s window {worst:.2f} x the limit; sent per 0.25 s: " \
                                                    f"{per_quarter}"


class _Recorder(BaseHTTPRequestHandler):
    received: dict[str, list[int]] = {}
    lock = threading.Lock()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = self.headers["Idempotency-Key"]
        with self.lock:
            assert key == body["key"]
            self.received[key] = [r["id"] for r in body["records"]]  # idempotent: a retry replaces
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_publish_to_an_http_endpoint(spark, admin, tmp_path: Path):
    ok(admin.post("/admin/v2/persistent/web/hook/events/publishRate", json={"publishThrottlingRateInMsg": 2000}))
    total = make_input(tmp_path / "in", {"web/hook/events": 3000, "web/hook/audit": 1000}, files=2)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.received = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ingest"
        summary = run_publish(spark, PublishConfig(output=str(tmp_path / "out"), source="files", sink=url,
                                                   input=str(tmp_path / "in"), partitions=2, batch_rows=50))
    finally:
        server.shutdown()
    ids = [i for chunk in _Recorder.received.values() for i in chunk]
    assert sorted(ids) == list(range(total)) and summary["records_out"] == total
    assert not list((tmp_path / "out").glob("part-*"))  # nothing went to files
    assert summary["limiters"]["topic:web/hook/events"]["throttled"] > 0
