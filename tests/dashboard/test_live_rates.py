"""Live rates are smooth for steady traffic: a participant admitting a steady 100 msgs/s, reporting every 0.25 s
+- 30 % with counters that advance in whole batches, reads 100 +- 10 % at every point the pages get from
``data.history`` -- the control plane's own history (``LiveState`` on a fake clock) through the dashboard's rates."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from controlplane.state import LiveState
from dashboard import data, rates
from protocol import Report
from protocol.state import HistoryPoint, HistoryState
from tests.controlplane.conftest import report
from tests.controlplane.fake_clock import FakeClock

from .answers import state

pytestmark = pytest.mark.unit

INTERVAL = 0.25
RATE = 100.0


def steady_history(seed: int, batch: float, seconds: float = 120.0, participants: int = 1) -> HistoryState:
    """The history after ``seconds`` of ``participants`` together admitting RATE msgs/s in batches of ``batch``
    (each a batch every batch / its rate seconds), each reporting every INTERVAL +- 30 %, uniformly at random."""
    rnd = random.Random(seed)
    clock = FakeClock(1_000_000.0)
    live = LiveState(INTERVAL, clock)
    start = clock.t
    due = {f"p{i}": start + rnd.random() * INTERVAL for i in range(participants)}
    seq = dict.fromkeys(due, 0)
    while min(due.values()) < start + seconds:
        pid = min(due, key=due.__getitem__)
        clock.t, seq[pid] = due[pid], seq[pid] + 1
        admitted = math.floor(RATE / participants * (clock.t - start) / batch) * batch
        counters = [{"level": "topic", "name": "acme/web/clicks", "kind": "publish", "admitted_msgs_total": admitted,
                     "admitted_bytes_total": 200 * admitted, "throttle_time_seconds_total": 0, "throttled_count": 0}]
        accepted, why = live.ingest(Report.model_validate(report(pid, seq=seq[pid], sent_at=clock.t,
                                                                 counters=counters)))
        assert accepted, why
        due[pid] += INTERVAL * (1 + rnd.uniform(-0.3, 0.3))
    return state("/v1/state/history", live.history())     # as /v1/state/history answers it, as data reads it


def values(history: HistoryState) -> list[float]:
    [series] = history.series
    return [p.admittedMsgsPerSecond for p in series.points if p.admittedMsgsPerSecond is not None]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("batch", [1, 10])
def test_a_steady_stream_reads_within_ten_percent_at_every_point(seed: int, batch: float) -> None:
    history = steady_history(seed, batch)
    shown = values(rates.smoothed(history, 60.0))
    assert len(shown) >= 60 / INTERVAL * 0.8
    assert all(abs(v - RATE) <= 0.1 * RATE for v in shown), (min(shown), max(shown))
    if batch > 1:   # one interval's rate zigzags with the batches and the jitter: what this smooths out
        raw = values(history)
        assert max(abs(v - RATE) for v in raw) > 0.3 * RATE


def test_two_participants_sharing_the_stream_read_within_ten_percent() -> None:
    shown = values(rates.smoothed(steady_history(1, 1, participants=2), 60.0))
    assert all(abs(v - RATE) <= 0.1 * RATE for v in shown), (min(shown), max(shown))


def test_the_pages_get_the_smoothed_rates_and_a_span_more_history(monkeypatch: pytest.MonkeyPatch) -> None:
    history = steady_history(5, 10)
    asked: list[tuple[tuple[str, Any], ...]] = []

    def get(conn: data.Conn, path: str, params: tuple[tuple[str, Any], ...] = ()) -> Any:
        assert path == "/v1/state/history"
        asked.append(params)
        return history

    monkeypatch.setattr(data, "_get", get)
    monkeypatch.setattr(data, "health", lambda conn: {"reportIntervalSeconds": INTERVAL})
    got = data.history(data.Conn("http://127.0.0.1:1"), 60.0)
    assert dict(asked[0])["seconds"] == 60.0 + rates.span_s(INTERVAL)
    assert isinstance(got, data.History)
    shown = values(got)
    assert got.source == "control plane" and len(shown) >= 60 / INTERVAL * 0.8
    assert got.rateSpanSeconds == rates.span_s(INTERVAL)
    assert all(abs(v - RATE) <= 0.1 * RATE for v in shown), (min(shown), max(shown))
    [series] = got.series
    assert series.points[-1].t - series.points[0].t < 60.0


def test_smoothing_weighs_each_point_by_the_time_it_covers_and_leaves_levels_alone() -> None:
    points = [HistoryPoint(t=0.0, admittedMsgsPerSecond=None, tokensMsgs=5.0),
              HistoryPoint(t=1.0, admittedMsgsPerSecond=10.0, tokensMsgs=-2.0, throttledPerSecond=4.0),
              HistoryPoint(t=3.0, admittedMsgsPerSecond=40.0, tokensMsgs=1.0),
              HistoryPoint(t=10.0, admittedMsgsPerSecond=7.0, tokensMsgs=0.0, participants=2)]
    got = rates.smooth_points(points, 1.0, span=3.0)
    assert [p.admittedMsgsPerSecond for p in got] == [None, 10.0, pytest.approx((10 * 1 + 40 * 2) / 3), 7.0]
    assert [p.throttledPerSecond for p in got] == [None, 4.0, 4.0, None]   # every rate field, each on its own
    assert [p.tokensMsgs for p in got] == [5.0, -2.0, 1.0, 0.0]
    assert [p.participants for p in got] == [0, 0, 0, 2]
    assert points[2].admittedMsgsPerSecond == 40.0    # the input is not changed
    assert rates.span_s(0.25) == rates.MIN_SPAN_S and rates.span_s(2.0) == 8.0
