"""The reporter on a ManualClock: demand estimation, PIP-82 suppression, failures, backoff and log-once."""

from __future__ import annotations

import logging
import time

import pytest

from collectors.client import Backoff, Rejected, Unreachable
from collectors.usage import STEAL_PAUSED, Suppression, UsageMeter, estimate_demand
from controlplane import views
from limiter import ManualClock, PublishLimits
from limiter.policy import Level, Rate
from protocol import Report, ReportResponse, UsageValues

from .helpers import InProcessControlPlane, grouped, make_participant, send_paced

pytestmark = pytest.mark.unit

KEY = "resource_group:publish:g"


def entry(report: Report, key: str = KEY):
    return next((u for u in report.usage if f"{u.level}:{u.direction}:{u.name}" == key), None)


# --- demand ---------------------------------------------------------------------------------------------


def test_estimate_demand() -> None:
    assert estimate_demand(100, 0.0, 100) == 100                   # never paused: it got what it wanted
    assert estimate_demand(300, 4 / 7, 300) == pytest.approx(700)  # 300 while paused 57 %: wanted 700
    assert estimate_demand(10, 0.99) == pytest.approx(200)         # at most 20 x usage in one round
    assert estimate_demand(0, 1.0, 5) == 10                        # starved outright: twice its share
    assert estimate_demand(5, STEAL_PAUSED, 100) == 200            # mostly paused: at least twice its share
    assert estimate_demand(50, 0.2, float("inf")) == pytest.approx(62.5)
    assert estimate_demand(50, -0.5) == 50 and estimate_demand(50, 7) == 1000   # clamped to 0..1


def measured(meter: UsageMeter, clock: ManualClock, limiter, holders: int = 1) -> UsageValues:
    s = limiter.snapshot()
    return meter.measure(str(id(limiter)), clock.now_s(), s.admitted_msgs, s.admitted_bytes, s.throttle_time_s,
                         holders, s.rate, clock.now_s())


@pytest.mark.parametrize("wants,limit", [(700, 500), (300, 100)])
def test_a_throttled_participants_demand_exceeds_its_usage(clock: ManualClock, wants: float, limit: float) -> None:
    limits = PublishLimits(clock)                      # default resolution (16 ms), as in production
    limits.attach_resource_group(Level.NAMESPACE, "acme/web", "g")
    rg = limits.limiter(Level.RESOURCE_GROUP, "g")
    rg.update_rate(Rate(limit), burst_s=0.25)
    producer = limits.producer("acme/web/busy")
    meter = UsageMeter()
    send_paced(clock, producer, wants, 1.0)            # drain the initial burst
    measured(meter, clock, rg)
    send_paced(clock, producer, wants, 1.0)
    v = measured(meter, clock, rg)
    assert v.usage_msgs_per_s == pytest.approx(limit, rel=0.05)
    assert v.demand_msgs_per_s > 1.3 * v.usage_msgs_per_s
    if wants / limit < 2:    # held part of the time: the pace shows (n sends over n - 1 gaps: a little high)
        assert wants <= v.demand_msgs_per_s <= 1.25 * wants
    else:                    # held nearly always: the pace does not show; it asks for at least twice its rate
        assert v.demand_msgs_per_s >= 2 * limit


def test_an_unthrottled_participants_demand_is_its_usage(clock: ManualClock) -> None:
    limits = PublishLimits(clock)
    limits.set_limit(Level.TENANT, "acme", Rate(1000))
    tenant = limits.limiter(Level.TENANT, "acme")
    a, b = limits.producer("acme/web/a"), limits.producer("acme/web/b")
    meter = UsageMeter()
    measured(meter, clock, tenant, 2)
    send_paced(clock, a, 50, 1.0)
    send_paced(clock, b, 150, 1.0)
    v = measured(meter, clock, tenant, 2)
    assert v.usage_msgs_per_s == pytest.approx(100, rel=0.02)      # 50 + 150 over the 2 s window
    assert v.demand_msgs_per_s == v.usage_msgs_per_s


def test_the_report_carries_usage_and_demand(clock: ManualClock) -> None:
    cp = InProcessControlPlane(grouped(100), clock=clock.now_s)
    p = make_participant(clock, cp)
    assert p.report_now() and p.policy_version == 3 and p.wait_ready(0)
    producer = p.producer("acme/web/t")
    clock.advance(0.25)
    assert p.report_now()                                     # registers the group's key
    send_paced(clock, producer, 300, 1.0, keepers=[p])
    assert p.report_now()
    u = entry(cp.reports[-1])
    assert u is not None and 90 <= u.usage_msgs_per_s <= 100 + 25 + 1   # the limit, plus the chunk granted first
    assert u.demand_msgs_per_s > 2 * u.usage_msgs_per_s
    report = cp.reports[-1]
    assert report.participant.participant_id == "me" and report.applied_policy_version == 3
    assert {(b.level, b.name) for b in report.buckets} >= {("resource_group", "g")}
    assert any(c.level == "resource_group" and c.throttled_count > 0 for c in report.counters)
    assert report.offload is not None and report.offload.limit_bytes_per_s == -1


# --- suppression ----------------------------------------------------------------------------------------


def uv(msgs: float, demand: float | None = None) -> UsageValues:
    return UsageValues(usage_msgs_per_s=msgs, demand_msgs_per_s=msgs if demand is None else demand)


def test_suppression_tolerance_mandatory_rounds_and_forcing() -> None:
    s = Suppression(tolerance_pct=5, max_rounds=3)
    send, unchanged = s.plan({"a": uv(100), "b": uv(10)})
    assert set(send) == {"a", "b"} and unchanged == []          # the first report is full
    s.commit(send, unchanged)
    send, unchanged = s.plan({"a": uv(104), "b": uv(11)})       # a: +4 % (kept); b: +10 % (sent)
    assert set(send) == {"b"} and unchanged == ["a"]
    s.commit(send, unchanged)
    send, unchanged = s.plan({"a": uv(104, 120), "b": uv(11)})  # a's demand moved 20 %
    assert set(send) == {"a"} and unchanged == ["b"]
    s.commit(send, unchanged)
    s.commit(*s.plan({"a": uv(104, 120), "b": uv(11)}))          # b: 2nd round without a report
    send, unchanged = s.plan({"a": uv(104, 120), "b": uv(11)})  # b: 3rd round -> mandatory
    assert "b" in send and "a" in unchanged
    s.force()                                                   # e.g. the round failed
    send, unchanged = s.plan({"a": uv(104, 120), "b": uv(11)})
    assert set(send) == {"a", "b"}
    s.commit(send, unchanged)
    s.force(["a"])                                              # e.g. missing from the answer's map
    send, unchanged = s.plan({"a": uv(104, 120), "b": uv(11)})
    assert set(send) == {"a"} and unchanged == ["b"]


def test_suppressed_rounds_keep_the_participant_and_its_usage_in_the_map(clock: ManualClock) -> None:
    cp = InProcessControlPlane(grouped(1000), clock=clock.now_s)
    p = make_participant(clock, cp, max_rounds=4)
    p.report_now()
    producer = p.producer("acme/web/t")
    for _ in range(12):
        send_paced(clock, producer, 40, 0.25, keepers=[p])      # a steady 40 msgs/s
        assert p.report_now()
    kinds = ["full" if entry(r) else "unchanged" if KEY in r.usage_unchanged else "-" for r in cp.reports[1:]]
    assert kinds.count("unchanged") >= 6                         # most rounds carry no usage values
    assert "full" in kinds[-4:]                                  # the mandatory report, every 4 rounds
    assert all(k != "unchanged" or kinds[max(0, i - 3):i + 1].count("unchanged") <= 3 for i, k in enumerate(kinds))
    answer = p.reporter.last_answer
    assert answer.usage == {} and answer.usageMissing == []          # no map asked for; nothing missing
    held = cp.live.usage_map([KEY])[KEY]["me"]
    assert held.usage_msgs_per_s == pytest.approx(40, rel=0.1)       # held by the control plane
    assert [x.participantId for x in views.participants(cp.live, 3).participants] == ["me"]


def test_a_restarted_control_plane_gets_full_usage_again(clock: ManualClock) -> None:
    cp = InProcessControlPlane(grouped(1000), clock=clock.now_s)
    p = make_participant(clock, cp)
    p.report_now()
    producer = p.producer("acme/web/t")
    for _ in range(3):
        send_paced(clock, producer, 40, 0.25, keepers=[p])
        p.report_now()
    assert KEY in cp.reports[-1].usage_unchanged
    cp.restart()                                                 # knows nothing; keeps the policies
    send_paced(clock, producer, 40, 0.25, keepers=[p])
    p.report_now()                                               # sent as unchanged: nothing held for it
    assert KEY in cp.reports[-1].usage_unchanged
    assert p.reporter.last_answer.usageMissing == [KEY]
    send_paced(clock, producer, 40, 0.25, keepers=[p])
    p.report_now()
    assert entry(cp.reports[-1]) is not None                     # ... so the next round sends it in full
    assert p.reporter.last_answer.usageMissing == []
    assert "me" in cp.live.usage_map([KEY])[KEY]


# --- failures -------------------------------------------------------------------------------------------


def test_unreachable_keeps_the_limits_logs_once_and_forces_a_full_report(clock: ManualClock,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    cp = InProcessControlPlane(grouped(1000), clock=clock.now_s)
    peer = make_participant(clock, cp, pid="peer")
    p = make_participant(clock, cp)
    p.report_now()
    peer.report_now()
    mine, theirs = p.producer("acme/web/a"), peer.producer("acme/web/b")
    for _ in range(3):
        send_paced(clock, mine, 900, 0.25, keepers=[p, peer])
        send_paced(clock, theirs, 900, 0.25, keepers=[p, peer])
        p.report_now()
        peer.report_now()
    rg = p.limits.limiter(Level.RESOURCE_GROUP, "g")
    assert rg.capacity == (1000, 0)                                 # a pool, filled by grants
    caplog.set_level(logging.INFO, logger="collectors")
    cp.fail = Unreachable("ConnectError: connection refused")
    for _ in range(4):
        send_paced(clock, mine, 900, 0.25, keepers=[p])
        assert not p.report_now()
    assert rg.rate.msgs == pytest.approx(500, rel=0.01)             # fail-static: the safe rate, 1000 / 2
    assert not p.connected and p.reporter.failures == 4
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable" in warnings[0].getMessage()
    assert "keeping the last limits" in warnings[0].getMessage()
    cp.fail = None
    send_paced(clock, mine, 900, 0.25, keepers=[p])
    assert p.report_now() and p.connected
    assert entry(cp.reports[-1]) is not None                       # full after a failure
    infos = [r for r in caplog.records if r.levelno == logging.INFO and "reachable again" in r.getMessage()]
    assert len(infos) == 1
    assert p.reporter.schedule.backoff.failures == 0


def test_a_refused_report_is_a_failure_too(clock: ManualClock, caplog: pytest.LogCaptureFixture) -> None:
    cp = InProcessControlPlane(grouped(1000))
    p = make_participant(clock, cp)
    cp.fail = Rejected(401, "a valid token is required")
    assert not p.report_now() and not p.report_now()
    assert p.policy_version == 0 and not p.wait_ready(0)
    assert sum("401" in r.getMessage() for r in caplog.records) == 1


def test_the_control_planes_interval_is_followed(clock: ManualClock) -> None:
    cp = InProcessControlPlane(grouped(1000), interval_s=0.5)
    p = make_participant(clock, cp, interval_s=1.0)
    p.report_now()
    assert p.reporter.interval_s == 0.5
    assert p.reporter.schedule.backoff.base_s == 0.5 and cp.timeout_s == 1.0


def test_an_interval_stretched_by_a_loaded_control_plane_is_followed_but_retries_keep_to_the_configured_one(
        clock: ManualClock) -> None:
    cp = InProcessControlPlane(grouped(1000), interval_s=1.0)
    cp.tells_place = False   # (a control plane that says no place in the interval: the participant's own spread)
    p = make_participant(clock, cp, interval_s=1.0)
    schedule = p.reporter.schedule
    assert schedule.next_delay_s(True) == 1.0
    cp.told_s = 4.0
    p.report_now()
    assert p.reporter.interval_s == 4.0 and cp.timeout_s == 5.0   # (2 intervals, at most 5 s: it is busy)
    schedule.rng = lambda: 0.25
    # told at about the same time as every other participant: the next report after a random half to one and a
    # half of the interval (one on average: a change brings no reports more), then the interval
    assert schedule.next_due(True, 100.0, 100.2) == 103.0 and schedule.next_due(True, 103.0, 103.2) == 107.0
    schedule.spread_next, schedule.rng = True, lambda: 0.999
    assert schedule.next_delay_s(True) == pytest.approx(5.996)
    assert schedule.backoff.base_s == 1.0 and schedule.backoff.cap_s == 10.0
    cp.told_s = 1.0
    p.report_now()
    assert p.reporter.interval_s == 1.0 and schedule.backoff.base_s == 1.0


def test_each_participant_reports_next_at_the_place_in_the_interval_the_control_plane_tells_it(
        clock: ManualClock) -> None:
    cp = InProcessControlPlane(grouped(1000), interval_s=1.0)
    cp.told_s = 10.0   # (a change of interval: without a place told, the next round would come at random)
    first, second = (make_participant(clock, cp, pid, interval_s=1.0) for pid in ("first", "second"))
    dues = []
    for p in (first, second, first):
        p.report_now()
        now = time.monotonic()
        due = p.reporter.schedule.next_due(True, now - 0.05, now)
        assert now + 5.0 - 0.05 <= due <= now + 15.0   # (a half to one and a half of the interval)
        dues.append(due)
    # slot 0's phase is 0 of the interval, slot 1's 0.618 of it; the first told again keeps its place
    assert (dues[1] - dues[0]) % 10.0 == pytest.approx(6.18, abs=0.05)
    assert (dues[2] - dues[0] + 5.0) % 10.0 - 5.0 == pytest.approx(0.0, abs=0.05)
    assert first.reporter.schedule.next_due(False, 100.0, 100.1) <= 100.1 + 1.0   # a failed round waits its backoff


def test_a_place_in_the_interval_no_interval_allows_is_not_followed(clock: ManualClock) -> None:
    class FarOff(InProcessControlPlane):
        def report(self, report: Report) -> ReportResponse:
            return super().report(report).model_copy(update={"nextReportInSeconds": 1e6})

    p = make_participant(clock, FarOff(grouped(1000), interval_s=1.0), interval_s=1.0)
    p.report_now()
    assert p.reporter.schedule.next_due(True, 100.0, 100.1) == 101.0


def test_backoff_is_exponential_capped_and_jittered() -> None:
    low = Backoff(0.25, 2.0, rng=lambda: 0.0)
    assert [low.next_delay_s() for _ in range(6)] == [0.125, 0.25, 0.5, 1.0, 1.0, 1.0]
    high = Backoff(0.25, 2.0, rng=lambda: 1.0)
    assert [high.next_delay_s() for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    high.reset()
    assert high.next_delay_s() == 0.25
    with pytest.raises(ValueError):
        Backoff(2.0, 1.0)
