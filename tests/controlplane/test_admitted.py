"""The usage the shared and resource-group views show is what each participant admitted over its last seconds,
from its counters (controlplane.admitted): steady traffic sent in batches reads steady, where one report
interval's usage swings with the batches (and read "over the limit" and "stranded" in turn)."""

from __future__ import annotations

import math
import random

import pytest

from controlplane import shown, views
from controlplane.admitted import MIN_SPAN_S, SPAN_S, Span, admitted_per_s, advance, mark
from controlplane.grants import GrantBook
from controlplane.state import LiveState
from dashboard.derive_shared import status
from limiter import ManualClock
from protocol import PolicySet, Report, ResourceGroup, limit_key
from protocol.state import SharedState
from tests.controlplane.conftest import report, usage
from tests.controlplane.fake_clock import FakeClock

pytestmark = pytest.mark.unit

KEY = limit_key("resource_group", "publish", "rg")
LIMITER = ("resource_group", "publish", "rg")


def counted(pid: str, seq: int, at: float, msgs: float, reported: float | None = None) -> Report:
    counters = [{"level": "resource_group", "name": "rg", "kind": "publish", "admitted_msgs_total": msgs,
                 "admitted_bytes_total": 100 * msgs, "throttle_time_seconds_total": 0, "throttled_count": 0}]
    entries = [] if reported is None else [usage("rg", reported)]
    return Report.model_validate(report(pid, seq=seq, sent_at=at, counters=counters, usage=entries))


def test_the_span_moves_on_every_span_s_and_reads_the_counters_over_it() -> None:
    span = advance(None, counted("p", 0, 100.0, 0))
    assert span.base is span.mid and admitted_per_s(span, counted("p", 0, 100.0, 0), [LIMITER]) == {}
    reports = [counted("p", i, 100.0 + 0.5 * i, 9 * i) for i in range(1, 40)]   # 18 msgs/s
    for r in reports:
        span = advance(span, r)
        dt = r.sent_at - span.base.sent_at
        assert SPAN_S <= dt <= 2 * SPAN_S + 0.5 or span.base.sent_at == 100.0   # (its first seconds)
        if dt >= MIN_SPAN_S:
            assert admitted_per_s(span, r, [LIMITER]) == {LIMITER: pytest.approx((18.0, 1800.0))}
    # the worked example of the module essay: a span of 9 s, 1,200 -> 1,362 messages
    example = Span(mark(counted("p", 1, 15.0, 1200)), mark(counted("p", 2, 20.0, 1290)))
    assert admitted_per_s(example, counted("p", 3, 24.0, 1362), [LIMITER]) == {LIMITER: pytest.approx((18.0, 1800))}
    # a limiter it does not count, or whose counter went down (replaced) since both, gives nothing: the reader
    # falls back to the reported usage
    assert admitted_per_s(example, counted("p", 3, 24.0, 12), [LIMITER, ("topic", "publish", "t")]) == {}
    # one the base does not count yet (a participant's first report counts none) is read from mid
    empty = mark(Report.model_validate(report("p", seq=1, sent_at=10.0)))
    assert admitted_per_s(Span(empty, mark(counted("p", 2, 20.0, 1290))), counted("p", 3, 24.0, 1362),
                          [LIMITER]) == {LIMITER: pytest.approx((18.0, 1800))}
    assert admitted_per_s(Span(empty, mark(counted("p", 2, 23.5, 1290))), counted("p", 3, 24.0, 1362),
                          [LIMITER]) == {}


def test_a_steady_hundred_a_second_in_batches_of_ten_reads_steady_where_each_interval_swings() -> None:
    """Two participants each admitting 50 msgs/s in sends of 10, reporting every 0.5 s +- 30 %, under a
    resource group of 100 msgs/s, never held back: the usage an interval reports swings by a third and more; the
    views show 100 +- 10 % (each participant 50 +- 10 %, its demand its usage) from the 12th second on, neither
    "over the limit" nor "stranded"."""
    rnd = random.Random(7)
    clock = FakeClock(1_000_000.0)
    live = LiveState(0.5, clock)
    ps = PolicySet(version=1, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=100)})
    book = GrantBook(0.5, None, clock=ManualClock().now_s)
    start = clock.t
    phase = {"a": rnd.random(), "b": rnd.random()}
    due = {pid: start + rnd.random() * 0.5 for pid in phase}
    last = dict.fromkeys(phase, (start, 0.0))
    seq = dict.fromkeys(phase, 0)
    raw, shown = [], []
    while min(due.values()) < start + 60:
        pid = min(due, key=due.__getitem__)
        clock.t, seq[pid] = due[pid], seq[pid] + 1
        admitted = math.floor(5 * (clock.t - start) + phase[pid]) * 10.0     # a send of 10 every 0.2 s
        t0, before = last[pid]
        accepted, why = live.ingest(counted(pid, seq[pid], clock.t, admitted, (admitted - before) / (clock.t - t0)))
        assert accepted, why
        last[pid] = (clock.t, admitted)
        due[pid] += 0.5 * (1 + rnd.uniform(-0.3, 0.3))
        if clock.t - start < 12:
            continue
        raw.append(sum(u.usage_msgs_per_s for u in live.shared_usage()[KEY].values()))
        doc: SharedState = views.shared(live, ps, book, False)
        [limit] = doc.limits
        shown.append(limit.usageMsgsPerSecond)
        assert status(limit)[0] == "ok", limit   # neither over the limit nor stranded, as the counters say
        for p in limit.participants:
            assert p.usageMsgsPerSecond == pytest.approx(50, rel=0.1), (clock.t - start, p)
            assert p.demandMsgsPerSecond == pytest.approx(p.usageMsgsPerSecond), p   # never held back
        group = views.resource_groups(live, ps, book).resourceGroups[0].publish.participants
        assert all(u.usage_msgs_per_s == pytest.approx(50, rel=0.1) for u in group.values()), group
    assert max(abs(v - 100) for v in raw) >= 30, "the reported usage did not swing: the test shows nothing"
    assert all(v == pytest.approx(100, rel=0.1) for v in shown), (min(shown), max(shown))


def test_the_demand_shown_is_the_usage_shown_times_the_factor_reported() -> None:
    demand = shown._demand
    assert demand(19.5, 16.0, 320.0) == pytest.approx(390.0)   # paused 95 %: 20 x what it admits
    assert demand(12.4, 16.0, 16.04) == pytest.approx(12.431)   # hardly held: about its usage
    assert demand(5.0, 0.0, 40.0) == 40.0                       # starved in its last interval: as it asked
    assert demand(5.0, 0.0, 0.0) == 5.0                         # gone quiet: never below what it admitted
