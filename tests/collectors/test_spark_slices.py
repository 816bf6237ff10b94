"""The Spark helpers pass a batch on whole, or -- large beside the tightest limit -- in slices charged one by one.

The helpers' producer is a real ``Producer`` over a real ``PublishRateLimiter`` on a manual clock; the limits are
high enough that no charge waits (this is about the slicing, not the pausing)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from collectors.spark import _charged_slices, arrow_size_of_pandas
from limiter import Level, ManualClock, Producer, PublishRateLimiter, Rate

pytestmark = pytest.mark.unit


def producer(rate: Rate) -> tuple[Producer, PublishRateLimiter]:
    clock = ManualClock(start_s=100.0)
    lim = PublishRateLimiter(rate, level=Level.TOPIC, name="acme/web/clicks", clock=clock)
    return Producer("p", [lim], clock=clock), lim


def arrow_slices(p: Producer, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    return list(_charged_slices(p, batch, batch.num_rows, batch.nbytes, lambda b, at, n: b.slice(at, n)))


def test_a_batch_large_beside_the_limit_goes_on_in_slices_charged_one_by_one() -> None:
    p, lim = producer(Rate(msgs=40_000))   # a 40th of its second: 1,000 rows
    batch = pa.record_batch({"id": pa.array(range(10_000), pa.int64())})
    out = arrow_slices(p, batch)
    assert [s.num_rows for s in out] == [1000] * 10
    assert pa.Table.from_batches(out).column("id").to_pylist() == list(range(10_000))   # in order, every row once
    snap = lim.snapshot()
    assert snap.admitted_msgs == 10_000
    assert snap.admitted_bytes == pytest.approx(batch.nbytes)   # the slices' charges add up to the batch's


def test_a_bytes_limit_slices_by_the_rows_that_make_its_40th() -> None:
    batch = pa.record_batch({"id": pa.array(range(1000), pa.int64())})   # 8 bytes a row
    p, _ = producer(Rate(msgs=-1, bytes=batch.nbytes * 4))   # a 40th of its second: a tenth of the batch
    assert [s.num_rows for s in arrow_slices(p, batch)] == [100] * 10


def test_with_no_binding_limit_a_batch_goes_on_whole_in_one_charge() -> None:
    for rate in (Rate.unlimited(), Rate(msgs=400_000)):   # (a 40th of 400,000 is the batch itself)
        p, lim = producer(rate)
        batch = pa.record_batch({"id": pa.array(range(10_000), pa.int64())})
        out = arrow_slices(p, batch)
        assert len(out) == 1 and out[0] is batch
        assert lim.snapshot().admitted_msgs == 10_000


def test_a_pandas_batch_is_sliced_by_its_rows_too() -> None:
    pd = pytest.importorskip("pandas")
    p, lim = producer(Rate(msgs=4_000))   # 100 rows a charge
    frame = pd.DataFrame({"id": range(250), "v": [0.5] * 250})
    out = list(_charged_slices(p, frame, len(frame), arrow_size_of_pandas(frame), lambda f, at, n: f.iloc[at:at + n]))
    assert [len(f) for f in out] == [100, 100, 50]
    assert pd.concat(out)["id"].tolist() == list(range(250))
    assert lim.snapshot().admitted_msgs == 250
