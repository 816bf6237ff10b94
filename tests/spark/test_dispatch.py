"""The dispatch job on the session's SparkSession against the live control plane.

A broker-level dispatch limiter (each process's own) adds a period's tokens once per period (1 s), so deliveries
come in bursts right after each period boundary; its rate is measured with ``common.steady_rate``: between the
first and the last read that had waited (backed off) for its limiter, so the window spans whole periods and
leaves out the initial full bucket. Reads of several subscriptions resuming at the same boundary count once
(``burst_gap_s``). A topic or subscription limit spans the workers: its tokens come in small grants from the
control plane, reads shrink to what was granted instead of waiting whole periods, and its rate is measured from
the first second on (``granted_rate``), after the first chunk.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from collectors.jobs import DispatchConfig, make_backlog, read_delivered, run_dispatch
from collectors.jobs.common import steady_rate
from collectors.jobs.consumer import read_cursor
from tests.spark.conftest import ok, within

pytestmark = [pytest.mark.spark, pytest.mark.integration]

BURST_GAP_S = 0.5


def steady(frame: pd.DataFrame, count: str = "msgs") -> float:
    reads = frame.groupby(["subscription", "read"]).agg(t=("delivered_at", "first"), msgs=("id", "size"),
                                                       entries=("entry", "nunique"), waited=("waited", "first"))
    rate, first, last = steady_rate(list(reads.t), list(reads[count]), list(reads.waited), BURST_GAP_S)
    assert last - first >= 1.9, f"measured over {last - first:.2f} s only"  # at least two whole periods
    return rate


def granted_rate(frame: pd.DataFrame) -> float:
    """Messages per second delivered from 1 s after the first delivery to the last one."""
    first, last = frame.delivered_at.min() + 1.0, frame.delivered_at.max()
    assert last - first >= 2.0, f"measured over {last - first:.2f} s only"
    return len(frame[(frame.delivered_at >= first) & (frame.delivered_at < last)]) / (last - first)


def assert_exactly_once(delivered: pd.DataFrame, output: Path, backlog: Path) -> None:
    """Per (subscription, topic): the delivered messages are exactly the backlog's first entries up to the
    stored cursor -- no gap, no duplicate."""
    for (sub, topic), frame in delivered.groupby(["subscription", "topic"]):
        cursor = read_cursor(output, sub, topic)
        meta = pq.ParquetFile(backlog / topic / "partition-0.parquet").metadata
        assert cursor > 0
        assert sorted(frame.id) == list(range(sum(meta.row_group(i).num_rows for i in range(cursor)))), (sub, topic)
        assert sorted(set(frame.entry)) == list(range(cursor))


def test_dispatch_subscription_and_topic_limits(spark, admin, broker_settings, tmp_path: Path):
    # acme/stream: each subscription 300 msgs/s (the topic's 2000 does not bind);
    # acme/batch: each topic 500 msgs/s shared by its subscriptions (their 400 each does not bind)
    ok(admin.post("/admin/v2/namespaces/acme/stream/subscriptionDispatchRate", json={"dispatchThrottlingRateInMsg": 300}))
    ok(admin.post("/admin/v2/namespaces/acme/stream/dispatchRate", json={"dispatchThrottlingRateInMsg": 2000}))
    ok(admin.post("/admin/v2/namespaces/acme/batch/dispatchRate", json={"dispatchThrottlingRateInMsg": 500}))
    ok(admin.post("/admin/v2/namespaces/acme/batch/subscriptionDispatchRate", json={"dispatchThrottlingRateInMsg": 400}))
    broker_settings("dispatchThrottlingRateInByte", 100_000_000)
    broker_settings("preciseDispatcherFlowControl", True)
    per_partition = make_backlog(tmp_path / "backlog", {"acme/stream/orders": 1, "acme/batch/events": 1}, entries=800)

    summary = run_dispatch(spark, DispatchConfig(backlog=str(tmp_path / "backlog"), output=str(tmp_path / "out"),
                                                 subscriptions=("etl", "audit"), duration_s=7, backoff_s=0.02))

    delivered = read_delivered(tmp_path / "out").to_pandas()
    assert_exactly_once(delivered, tmp_path / "out", tmp_path / "backlog")
    assert summary["records_out"] == len(delivered) and summary["records_in"] == 4 * per_partition
    for sub in ("etl", "audit"):
        rate = granted_rate(delivered[(delivered.topic == "acme/stream/orders") & (delivered.subscription == sub)])
        # (10 %: a read drains what was granted, and the next grant comes a keeper's poll later)
        assert within(rate, 300, 0.1), f"subscription {sub} of acme/stream/orders: {rate:.1f} msgs/s against 300"
        assert summary["subscriptions"][f"{sub}@acme/stream/orders"]["precise"] is True
    rate = granted_rate(delivered[delivered.topic == "acme/batch/events"])
    # held and used: a topic limit shared by two subscriptions' dispatchers on two workers (10 %: as above)
    assert 0.9 * 500 <= rate <= 1.05 * 500, f"topic acme/batch/events: {rate:.1f} msgs/s against 500"
    throttled = summary["throttled_reads"]
    assert throttled["subscription:acme/stream/orders/etl"] > 0 and throttled["topic:acme/batch/events"] > 0
    # the stream topic's 2000 does not bind: the subscriptions' limits throttle hundreds of reads, the topic's at
    # most a few, while one of its shared grants is in flight on a loaded machine (4 of 648 in one CI run)
    by_subscriptions = sum(throttled[f"subscription:acme/stream/orders/{s}"] for s in ("etl", "audit"))
    assert throttled["topic:acme/stream/orders"] <= 0.02 * by_subscriptions, throttled
    assert throttled["broker:broker"] == 0


def test_dispatch_broker_limit_counting_entries_resumes_from_the_cursor(spark, broker_settings, tmp_path: Path):
    # batch counting: the broker limit of 40 is in entries per second, over every subscription of the process
    broker_settings("dispatchThrottlingRateInMsg", 40)
    broker_settings("dispatchThrottlingOnBatchMessageEnabled", True)
    make_backlog(tmp_path / "backlog", {"initech/logs/app": 1}, entries=600, msgs_per_entry=5)
    config = DispatchConfig(backlog=str(tmp_path / "backlog"), output=str(tmp_path / "out"),
                            subscriptions=("a", "b"), duration_s=6, backoff_s=0.02)

    first = run_dispatch(spark, config)
    delivered = read_delivered(tmp_path / "out").to_pandas()
    rate = steady(delivered, count="entries")
    assert within(rate, 40), f"broker: {rate:.2f} entries/s against 40"
    assert first["subscriptions"]["a@initech/logs/app"]["count_entries"] is True
    assert first["throttled_reads"]["broker:broker"] > 0

    second = run_dispatch(spark, DispatchConfig(**{**config.__dict__, "duration_s": 3}))  # same subscriptions
    for sub in ("a", "b"):
        key = f"{sub}@initech/logs/app"
        assert second["subscriptions"][key]["cursor"][0] == first["subscriptions"][key]["cursor"][1]
    delivered = read_delivered(tmp_path / "out").to_pandas()
    assert_exactly_once(delivered, tmp_path / "out", tmp_path / "backlog")
    assert second["records_out"] > 0 and len(delivered) == first["records_out"] + second["records_out"]
