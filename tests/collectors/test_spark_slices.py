"""The Spark helpers pass a batch on whole, or -- large beside the tightest limit -- in slices charged one by one
(``throttle_rows``' batches of rows too).

The helpers' producer is a real ``Producer`` over a real ``PublishRateLimiter`` on a manual clock; the limits are
high enough that no charge waits (this is about the slicing, not the pausing)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from collectors import spark
from collectors.spark import _charged_slices, arrow_size_of_pandas, throttle_rows
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


def test_a_sliced_batch_says_all_its_rows_are_coming_before_its_first_slice_is_charged() -> None:
    p, _ = producer(Rate(msgs=4_000))   # a 40th of its second: 100 rows
    batch = pa.record_batch({"id": pa.array(range(250), pa.int64())})
    coming = []
    for piece in _charged_slices(p, batch, batch.num_rows, batch.nbytes, lambda b, at, n: b.slice(at, n)):
        coming.append((piece.num_rows, p.coming_msgs))
    assert coming == [(100, 150.0), (100, 50.0), (50, 0.0)]   # (its pool asks for the rest in one answer)
    small = pa.record_batch({"id": pa.array(range(80), pa.int64())})
    p, _ = producer(Rate(msgs=4_000))
    assert len(arrow_slices(p, small)) == 1 and p.coming_msgs is None   # a batch of one send says nothing


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


def charges_of(p: Producer, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The msgs of every charge ``p`` makes from here on (through its real ``acquire``)."""
    charges, acquire = [], p.acquire

    def recorded(msgs: float = 1, bytes: float = 0, **kw):
        charges.append(msgs)
        return acquire(msgs=msgs, bytes=bytes, **kw)
    monkeypatch.setattr(p, "acquire", recorded)
    return charges


def test_throttle_rows_charges_a_batch_large_beside_the_limit_in_sends_and_passes_each_on_once_charged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (a batch of 100 charged whole against 1,000 msgs/s: each worker of a shared limit a tenth of it ahead)
    p, lim = producer(Rate(msgs=1000))   # a 40th of its second: 25 rows
    charges = charges_of(p, monkeypatch)
    monkeypatch.setattr(spark, "_producer", lambda topic, name, options: p)
    seen = []
    for row in throttle_rows(range(250), "acme/web/clicks", batch_rows=100, row_bytes=lambda r: 8):
        seen.append((row, lim.snapshot().admitted_msgs))
    assert [row for row, _ in seen] == list(range(250))
    assert charges == [25] * 10
    assert all(row < charged <= row + 25 for row, charged in seen)   # each row passed on once its send is charged
    assert lim.snapshot().admitted_bytes == pytest.approx(250 * 8)


def test_throttle_rows_with_a_topic_per_row_charges_each_topics_part_in_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    p, lim = producer(Rate(msgs=1000))
    charges = charges_of(p, monkeypatch)
    monkeypatch.setattr(spark, "_producer", lambda topic, name, options: p)   # (both topics: one producer here)
    rows = list(throttle_rows(range(100), lambda r: f"acme/web/t{r % 2}", batch_rows=100))
    assert rows == list(range(100))
    assert charges == [25, 25, 25, 25]   # 50 rows of each topic, in sends of 25
    assert lim.snapshot().admitted_msgs == 100
