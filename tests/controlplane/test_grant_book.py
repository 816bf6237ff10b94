"""GrantBook: a restarted control plane re-learns before it hands out the whole limit again."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from collectors.grants import OUTAGE_SWITCH_S
from controlplane.grants import MARKER, MARKER_STALE_S, OWN_MOMENT_LAG, RETRY_MIN_S, GrantBook, learning_s_for
from limiter import ManualClock
from limiter.grants import HELD_SLACK
from limiter.policy import Level
from protocol import Grant, GrantAsk, Outcomes, PolicySet, PolicyView, ResourceGroup, Spend

pytestmark = pytest.mark.unit

LIMIT = 1000.0
POLICIES = PolicySet(version=1, resourceGroups={"rg": ResourceGroup(publishRateInMsgs=LIMIT)})


def ask(wants: float, safe: float = 0.0) -> list[GrantAsk]:
    return [GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=wants,
                     rate_msgs_per_s=LIMIT, safe_msgs_per_s=safe)]


def restarted(tmp_path: Path, clock: ManualClock, marker_age_s: float) -> GrantBook:
    """A book started over ``tmp_path`` whose marker was last touched ``marker_age_s`` ago."""
    marker = tmp_path / MARKER
    marker.touch()
    os.utime(marker, (1_000_000.0 - marker_age_s,) * 2)
    return GrantBook(0.25, tmp_path, clock=clock.now_s, wall=lambda: 1_000_000.0)


def test_a_fresh_data_directory_grants_at_once(tmp_path: Path) -> None:
    clock = ManualClock()
    book = GrantBook(0.25, tmp_path, clock=clock.now_s)
    assert not book.learning
    grant = book.answer("a", ask(250), POLICIES)[0]
    assert grant.msgs == pytest.approx(250)
    assert grant.safe_msgs_per_s == pytest.approx(LIMIT)   # alone: the whole limit is its fallback


def test_a_stale_marker_means_no_learning(tmp_path: Path) -> None:
    assert not restarted(tmp_path, ManualClock(), MARKER_STALE_S + 1).learning


def test_a_restart_slower_than_the_learning_time_still_re_learns(tmp_path: Path) -> None:
    # participants run at their fallback rates through an outage of any length: a marker older than the learning
    # time (a 1.5-s outage plus a slow start on a loaded machine) still means they may be out there
    clock = ManualClock()
    book = restarted(tmp_path, clock, 3 * learning_s_for(0.25))
    assert book.learning
    assert book.answer("a", ask(250, safe=500), POLICIES)[0].msgs == 0   # no first burst
    clock.advance(learning_s_for(0.25) + 0.01)
    assert not book.learning


def test_re_learning_paces_each_participant_at_the_fallback_rate_it_brings(tmp_path: Path) -> None:
    clock = ManualClock()
    book = restarted(tmp_path, clock, 1.0)
    assert book.learning
    # two participants that ran at 500/s each through the outage come back and ask as fast as they can
    got = {"a": [], "b": []}
    for _ in range(40):                       # 2 s, an ask every 50 ms
        for who in ("a", "b"):
            grant = book.answer(who, ask(250, safe=500), POLICIES)[0]
            got[who].append((clock.now_s(), grant.msgs))
            # alone so far or not, the fallback answered stays what it brought (not the whole limit)
            assert grant.safe_msgs_per_s == pytest.approx(500)
        clock.advance(0.05)
    for who, grants in got.items():
        assert grants[0][1] == 0, f"{who}: a first burst on top of what it spent at its fallback rate"
        for start, _ in grants:               # never more than its fallback rate in any window
            assert sum(a for t, a in grants if start <= t < start + 1.0) <= 500 + 1e-6
        assert sum(a for t, a in grants if t >= 1.0) == pytest.approx(500, rel=0.06)  # and it gets it


@pytest.mark.parametrize("failing_s", [0.6, 0.8, 1.2])
@pytest.mark.parametrize("says_so", [True, False])
def test_a_participant_back_from_its_fallback_rate_gets_nothing_on_top_of_those_spends(
        tmp_path: Path, failing_s: float, says_so: bool) -> None:
    # re-learning (a shared store restarted), two participants at their 500/s fallback rates; "a"'s asks then fail
    # for a while (a replica failing fast): it spends its pool, then (after OUTAGE_SWITCH_S) its fallback rate,
    # which no grant counts; its next ask says so -- or, as an older participant would, does not
    clock = ManualClock()
    book = restarted(tmp_path, clock, 1.0)
    fails_at, back_at = 2.0, 2.0 + failing_s
    pool, spends, granted_after, fell_back = 0.0, [], 0.0, False
    for step in range(500):                   # 5 s in 10-ms steps, an ask every 50 ms
        now = step * 0.01
        if step % 5 == 0:
            book.answer("b", ask(125, safe=500), POLICIES)
            if not fails_at <= now < back_at:
                a = ask(125, safe=500)[0].model_copy(update={"fell_back": fell_back and says_so})
                got = book.answer("a", [a], POLICIES)[0].msgs
                pool, fell_back = pool + got, False
                granted_after += got if now >= back_at else 0.0
        if fails_at + OUTAGE_SWITCH_S <= now < back_at:
            spends.append((now, 5.0))         # its fallback rate, 500/s
            fell_back = True
        else:
            spent = min(pool, 7.0)            # it wants 700/s: whatever its pool holds
            pool -= spent
            spends.append((now, spent))
        clock.advance(0.01)
    worst = max(sum(a for t, a in spends if start <= t < start + 1.0) for start in [k * 0.05 for k in range(80)])
    if says_so:
        assert worst <= 500 * 1.02, f"{worst:.0f} spent in a second against a fallback rate of 500/s"
        assert granted_after >= 500 * (5.0 - back_at - 0.2)   # and it is served again at its rate
    else:   # what it was before participants said so: the refill of its time away came on top
        assert worst >= 500 * 1.15   # (1.2 of it, measured)


def test_a_participant_without_a_fallback_gets_a_static_split_while_re_learning(tmp_path: Path) -> None:
    clock = ManualClock()
    book = restarted(tmp_path, clock, 1.0)
    total = 0.0
    for _ in range(40):
        total += book.answer("new", ask(250), POLICIES)[0].msgs
        clock.advance(0.05)
    assert total == pytest.approx(LIMIT / 2 * 1.95, rel=0.06)   # half the limit (at least two share it)


def test_after_learning_the_whole_limit_is_handed_out(tmp_path: Path) -> None:
    clock = ManualClock()
    book = restarted(tmp_path, clock, 1.0)
    clock.advance(learning_s_for(0.25) + 0.01)
    assert not book.learning
    assert book.answer("a", ask(250, safe=500), POLICIES)[0].msgs == pytest.approx(250)


def test_a_participant_done_with_a_limit_leaves_its_fair_share_to_the_others(tmp_path: Path) -> None:
    clock = ManualClock()
    book = GrantBook(0.25, tmp_path, clock=clock.now_s)
    book.answer("a", ask(100), POLICIES)
    assert book.answer("b", ask(100), POLICIES)[0].fair_msgs_per_s == pytest.approx(LIMIT / 2)
    clock.advance(0.1)
    # a's task ended holding nothing (or a debt): an ask that wants nothing and returns nothing says so
    left = book.answer("a", ask(0), POLICIES)[0]
    assert left.msgs == 0
    clock.advance(0.1)
    assert book.answer("b", ask(100), POLICIES)[0].fair_msgs_per_s == pytest.approx(LIMIT)


def test_the_safe_split_counts_workers_that_sat_out_the_last_window(tmp_path: Path) -> None:
    """A stream's two workers take turns with micro-batches: each second only one of them asks. The fallback
    rate is still half the limit (a split by the last window's askers would give each the whole of it, and the
    pair twice the limit through an outage), also when one has just left the limit at the end of its
    micro-batch; one that says goodbye stops counting."""
    clock = ManualClock()
    book = GrantBook(0.25, tmp_path, clock=clock.now_s)
    for turn in range(6):
        who = "ab"[turn % 2]
        got = book.answer(who, ask(100), POLICIES)[0]
        assert got.safe_msgs_per_s == pytest.approx(LIMIT if turn == 0 else LIMIT / 2), turn
        assert got.holders == (1 if turn == 0 else 2)
        clock.advance(1.5)                     # the other one's ask has left the 1-s window
    book.answer("a", ask(0), POLICIES)         # a's micro-batch ended: it leaves the limit, back for the next
    assert book.answer("b", ask(100), POLICIES)[0].safe_msgs_per_s == pytest.approx(LIMIT / 2)
    book.goodbye("a")                          # a's process ends
    assert book.answer("b", ask(100), POLICIES)[0].safe_msgs_per_s == pytest.approx(LIMIT)
    book.answer("a", ask(100), POLICIES)
    clock.advance(5 * 1.0 + 0.1)               # five windows without a word from a: it no longer counts
    assert book.answer("b", ask(100), POLICIES)[0].safe_msgs_per_s == pytest.approx(LIMIT)


def test_the_answer_to_a_give_back_or_a_leave_keeps_counting_the_one_that_asks(tmp_path: Path) -> None:
    """A stream's worker gives back at the end of each micro-batch: if the control plane dies right after, that
    answer's fallback is what the worker runs at. It must be its part of the limit, not the whole of it."""
    clock = ManualClock()
    book = GrantBook(0.25, tmp_path, clock=clock.now_s)
    book.answer("a", ask(100), POLICIES)
    book.answer("b", ask(100), POLICIES)
    clock.advance(0.1)
    gave_back = book.answer("a", [GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=0,
                                           returns_msgs=50, rate_msgs_per_s=LIMIT)], POLICIES)[0]
    assert gave_back.safe_msgs_per_s == pytest.approx(LIMIT / 2)
    book.answer("a", ask(100), POLICIES)       # a's next micro-batch
    left = book.answer("b", ask(0), POLICIES)[0]
    assert left.safe_msgs_per_s == pytest.approx(LIMIT / 2)



def test_a_report_counts_for_no_more_than_the_limit(tmp_path: Path) -> None:
    # a pool holds at most the limit: a report of more (a bug, or a limit cut a moment ago) counts as the limit,
    # so the others still get the slack beside it, and all of the limit once it is silent for a window
    clock = ManualClock()
    book = GrantBook(1.0, tmp_path, clock=clock.now_s)
    liar = GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=1, rate_msgs_per_s=1,
                    held_msgs=1e300, spent=[])
    book.answer("liar", [liar], POLICIES)
    book.answer("liar", [liar], POLICIES)   # idle since its last report: what it holds is counted

    def b_spends_as_it_goes(last: float) -> float:   # b reports too, spending each grant by its next ask
        spent = [Spend(ago_s=0.0, msgs=last, bytes=0.0)] if last > 0 else []
        return book.answer("b", [ask(LIMIT)[0].model_copy(update={"held_msgs": 0.0, "spent": spent})],
                           POLICIES)[0].msgs

    last, got = 0.0, 0.0
    for _ in range(50):
        clock.advance(0.02)
        book.answer("liar", [liar], POLICIES)
        last = b_spends_as_it_goes(last)
        got += last
    assert 0.5 * HELD_SLACK * LIMIT <= got <= HELD_SLACK * LIMIT + 1e-6   # the slack beside the liar's limit
    clock.advance(1.01)
    got = 0.0
    for _ in range(50):
        clock.advance(0.02)
        last = b_spends_as_it_goes(last)
        got += last
    assert got >= 0.9 * LIMIT


def adaptive_policies(ceiling: float = 1000, floor: float = -1, period_s: int = 1, where: str = "topic",
                      version: int = 1) -> PolicySet:
    rate = {"publishThrottlingRateInMsg": ceiling, "adaptive": True, "adaptiveFloorInMsg": floor,
            "ratePeriodInSecond": period_s}
    if where == "topic":
        return PolicySet.model_validate({"version": version, "topics": {"t/ns/x": {"publishRate": rate}}})
    if where == "namespace":   # a namespace's rate is each topic's own (Pulsar): each topic adapts on its own
        return PolicySet.model_validate({"version": version, "namespaces": {"t/ns": {"publishRate": rate}}})
    return PolicySet.model_validate({"version": version, "tenants": {"t": {"publishRate": rate}}})


def topic_ask(wants: float, **outcomes: float) -> list[GrantAsk]:
    return [GrantAsk(level="topic", name="t/ns/x", direction="publish", wants_msgs=wants, rate_msgs_per_s=1000,
                     outcomes=Outcomes(**outcomes) if outcomes else None)]


@pytest.mark.parametrize("where, level, name", [("topic", Level.TOPIC, "t/ns/x"),
                                                ("namespace", Level.TOPIC, "t/ns/x"),
                                                ("tenant", Level.TENANT, "t")])
def test_the_policies_say_which_limits_adapt_and_their_floor_per_second(where: str, level: Level, name: str) -> None:
    view = PolicyView(adaptive_policies(1000, floor=200, period_s=2, where=where))
    assert view.limit(level, "publish", name).adaptive_floor_per_s == 100          # 200 per 2 s
    assert view.limit(level, "dispatch", name).adaptive_floor_per_s is None
    plain = PolicyView(PolicySet.model_validate({"version": 1, "topics": {
        "t/ns/x": {"publishRate": {"publishThrottlingRateInMsg": 10}}}}))
    assert plain.limit(Level.TOPIC, "publish", "t/ns/x").adaptive_floor_per_s is None


def test_an_adaptive_limit_grants_what_the_sink_takes_and_a_pause_stops_every_asker() -> None:
    clock = ManualClock()
    book, ps = GrantBook(0.25, clock=clock.now_s), adaptive_policies(1000)
    assert book.answer("a", topic_ask(250), ps)[0].msgs == pytest.approx(100)   # smooth: a tenth of a second
    clock.advance(1.0)
    book.answer("a", topic_ask(1, ok=400), ps)
    book.answer("a", topic_ask(1, throttled=20), ps)                                # the sink refused
    shared = book.shares({}, ps)["topic:publish:t/ns/x"]
    assert shared["adaptive"]["ratePerSecond"] == pytest.approx(500)                 # max(0.5 x 1,000, 0.9 x 400/1 s)
    assert shared["msgs"]["limitPerSecond"] == pytest.approx(500)
    clock.advance(1.0)
    grant = book.answer("b", topic_ask(1000), ps)[0]
    assert grant.msgs <= 500 * 0.25 + 1e-6 and grant.pause_s == 0
    grant = book.answer("a", topic_ask(100, throttled=5, retry_after_s=3.0), ps)[0]
    assert (grant.msgs, grant.pause_s, grant.retry_s) == (0, pytest.approx(3.0), pytest.approx(3.0))
    assert book.answer("b", topic_ask(100), ps)[0].pause_s == pytest.approx(3.0)     # every asker, not only "a"
    clock.advance(3.0)
    assert book.answer("b", topic_ask(100), ps)[0].msgs > 0                          # and after it, grants again


def test_the_operators_change_wins_over_what_an_adaptive_limit_learnt() -> None:
    clock = ManualClock()
    book = GrantBook(0.25, clock=clock.now_s)
    book.answer("a", topic_ask(250), adaptive_policies(1000))
    clock.advance(1.0)
    book.answer("a", topic_ask(1, ok=300, throttled=10), adaptive_policies(1000))
    assert book.shares({}, adaptive_policies(1000))["topic:publish:t/ns/x"]["adaptive"]["ratePerSecond"] < 1000
    raised = adaptive_policies(2000, version=2)
    book.answer("a", topic_ask(1), raised)
    got = book.shares({}, raised)["topic:publish:t/ns/x"]["adaptive"]
    assert (got["ratePerSecond"], got["ceilingPerSecond"], got["changedBy"]) == (2000, 2000, "operator")
    plain = PolicySet.model_validate({"version": 3, "topics": {"t/ns/x": {"publishRate": {
        "publishThrottlingRateInMsg": 2000}}}})
    book.answer("a", topic_ask(1), plain)                                             # adaptive switched off
    assert book.shares({}, plain)["topic:publish:t/ns/x"]["adaptive"] is None


def test_an_adaptive_limit_keeps_a_trace_a_point_a_second_for_the_dashboard() -> None:
    clock = ManualClock()
    book, ps = GrantBook(0.25, clock=clock.now_s, wall=lambda: 1_000_000.0 + clock.now_s()), adaptive_policies(1000)
    for _second in range(3):
        for _ in range(4):   # four asks a second: one point a second
            book.answer("a", topic_ask(10, ok=100), ps)
            clock.advance(0.25)
    book.answer("a", topic_ask(10, ok=100, throttled=50), ps)                          # the sink refused
    [(key, points)] = book.adaptive_trace().items()
    assert key == "topic:publish:t/ns/x" and len(points) == 4
    assert [p["t"] - points[0]["t"] for p in points] == pytest.approx([0, 1, 2, 3])
    assert points[1]["okPerSecond"] == pytest.approx(400) and points[1]["ceilingPerSecond"] == 1000
    assert points[-1]["throttledPerSecond"] == pytest.approx(50) and points[-1]["ratePerSecond"] < 1000
    plain = GrantBook(0.25, clock=clock.now_s)
    plain.answer("a", ask(10), POLICIES)
    assert plain.adaptive_trace() == {}                                                   # none adapts


def test_a_send_the_sink_took_too_slowly_cuts_an_adaptive_limit_with_a_latency_bound() -> None:
    clock = ManualClock()
    book = GrantBook(0.25, clock=clock.now_s)
    rate = {"publishThrottlingRateInMsg": 1000, "adaptive": True, "adaptiveSlowMs": 250}
    ps = PolicySet.model_validate({"version": 1, "topics": {"t/ns/x": {"publishRate": rate}}})
    assert PolicyView(ps).limit(Level.TOPIC, "publish", "t/ns/x").adaptive_slow_s == 0.25
    book.answer("a", topic_ask(10), ps)
    clock.advance(1.0)
    book.answer("a", topic_ask(10, ok=800, slowest_s=0.1), ps)                        # fast enough: nothing
    assert book.shares({}, ps)["topic:publish:t/ns/x"]["adaptive"]["ratePerSecond"] == 1000
    book.answer("a", topic_ask(10, ok=100, slowest_s=0.6), ps)                        # too slow: "too many"
    # 0.93 x the 900 delivered in that second
    assert book.shares({}, ps)["topic:publish:t/ns/x"]["adaptive"]["ratePerSecond"] == pytest.approx(837)


def test_switching_a_limit_to_adaptive_live_keeps_what_its_window_granted() -> None:
    clock = ManualClock()
    book = GrantBook(0.25, clock=clock.now_s)
    plain = PolicySet.model_validate({"version": 1, "topics": {"t/ns/x": {"publishRate": {
        "publishThrottlingRateInMsg": 1000}}}})
    for pid in ("a", "b", "c", "d"):
        book.answer(pid, topic_ask(250), plain)
        clock.advance(0.01)
    before = book.shares({}, plain)["topic:publish:t/ns/x"]["msgs"]["granted"]
    switched = adaptive_policies(1000, version=2)
    got = book.answer("e", topic_ask(250), switched)[0].msgs
    after = book.shares({}, switched)["topic:publish:t/ns/x"]
    assert after["msgs"]["granted"] == pytest.approx(before + got)       # the window's grants still count
    assert after["adaptive"] is not None and got == pytest.approx(20)   # smooth now: 0.1 s of a fair 200 (5 ask)


def test_an_adaptive_limit_reads_its_sink_over_the_time_a_sender_asked_not_over_sparks_pauses() -> None:
    """Every holder gave back (a micro-batch ended) and one asks again 0.4 s later (the next one): the sink was
    not asked in between, and a refusal soon after reads it over the time it was."""
    clock = ManualClock()
    book, ps = GrantBook(0.25, clock=clock.now_s), adaptive_policies(1000)
    book.answer("a", topic_ask(100), ps)
    for _ in range(2):
        clock.advance(0.2)
        book.answer("a", topic_ask(100, ok=140), ps)                                   # 700/s
    clock.advance(0.2)
    leave = GrantAsk(level="topic", name="t/ns/x", direction="publish", returns_msgs=10,
                     outcomes=Outcomes(ok=140))
    book.answer("a", [leave], ps)                                                       # the task ended
    clock.advance(0.4)                                                                  # Spark's pause
    book.answer("a", topic_ask(100), ps)
    clock.advance(0.3)
    book.answer("a", topic_ask(100, ok=210, throttled=20), ps)
    # 630 delivered in the 0.9 s the sink was asked: 700/s, and the cut to 0.93 x 700 (over all 1.3 s, 485/s and
    # a cut to 500)
    assert book.shares({}, ps)["topic:publish:t/ns/x"]["adaptive"]["ratePerSecond"] == pytest.approx(651)


def test_a_lone_asker_held_back_comes_back_twice_as_soon_as_each_of_two() -> None:
    """One asker at the limit's pace (100 asks a second) may ask every 10 ms; two are spaced 20 ms apart each, so
    that the limit's asks stay at its pace. A task alone at a micro-batch's end is paced by its answers: each carries
    what came free since the last, and at 10,000 a second answers 20 ms apart left a sawtooth of room averaging 1 %
    of the limit while it ran."""
    clock = ManualClock()
    book = GrantBook(1.0, None, clock=clock.now_s)
    while book.answer("a", ask(250), POLICIES)[0].msgs > 0:   # the window spent by one asker
        clock.advance(0.001)
    alone = book.answer("a", ask(250), POLICIES)[0]
    beside = book.answer("b", ask(250), POLICIES)[0]
    assert alone.msgs == 0 and alone.retry_s == pytest.approx(0.01)
    assert beside.msgs == 0 and beside.retry_s == pytest.approx(2 / 100)


def asker_at(data_dir: Path, send: float = 0.0):
    """``answer(at, wants, returns, who)``: participant ``who``'s ("a"'s) ask of the resource group at ``at`` s on
    a fresh book's clock (its producers sending ``send`` at a time), answered."""
    clock = ManualClock()
    book = GrantBook(0.25, data_dir, clock=clock.now_s)
    t0 = clock.now_s()

    def answer(at: float, wants: float, returns: float = 0.0, who: str = "a") -> Grant:
        clock.advance(t0 + at - clock.now_s())
        return book.answer(who, [GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=wants,
                                          returns_msgs=returns, rate_msgs_per_s=LIMIT, send_msgs=send)], POLICIES)[0]
    return answer


def test_a_micro_batch_worker_short_of_a_spent_window_comes_back_when_it_frees_a_steady_one_at_the_poll(
        tmp_path: Path) -> None:
    # (a poll's phase against that moment cost a micro-batch stream a share of its limit every window; a steady
    # group's shares moved when its asks came sooner)
    def retries(micro_batch: bool) -> list[float]:
        answer = asker_at(tmp_path / str(micro_batch))
        start = 0.0
        if micro_batch:      # a first micro-batch spends 90, gives 10 back at its end; Spark's gap; it is back
            answer(0.0, 100)
            answer(0.05, 0, returns=10)
            start = 0.3
        got = sum(answer(start + at, 250).msgs for at in (0.0, 0.01, 0.26, 0.51))
        assert got == pytest.approx(LIMIT - 90 * micro_batch)     # the window spent
        answer(start + 0.7, 200)     # (the first micro-batch's 90 have slid out by then)
        return [answer(start + at, 200).retry_s for at in (0.995, 0.999)]
    # the first chunk of the catch-up slides out in 5 ms: then (and a millisecond); never sooner than a quarter of
    # the poll (RETRY_MIN_S, one asker's spacing at the limit's pace)
    assert retries(micro_batch=True) == [pytest.approx(0.005 + 0.001), pytest.approx(RETRY_MIN_S / 4)]
    assert retries(micro_batch=False) == [pytest.approx(RETRY_MIN_S)] * 2


def test_a_micro_batch_worker_that_says_its_send_comes_back_when_room_for_one_send_frees(tmp_path: Path) -> None:
    """Held back by a spent window, a micro-batch worker whose producers send 25 at a time is told to come back when
    25 free, not when a whole chunk does: its waiting producer needs one send. (At 10,000 a second room of a few
    hundred, a lump sliding out, sat unused for 9-13 ms until a chunk's moment or the poll; told the send's moment
    the stream read 0.999 of its limit, 0.997 before.)"""
    def retry(send: float) -> float:
        answer = asker_at(tmp_path / str(send), send=send)
        answer(0.0, 100)                 # a first micro-batch; it gives 10 back at its end; Spark's gap
        answer(0.05, 0, returns=10)
        assert answer(0.3, 30).msgs == 30                     # back: a first grant of 30, then the rest of the window
        while answer(0.303, 250).msgs > 0:
            pass
        return answer(1.295, 200).retry_s                     # the 30 slide out at 1.3 s, the rest at 1.303 s
    assert retry(send=25) == pytest.approx(0.005 + 0.001)     # room for one send: the 30 sliding out
    assert retry(send=0) == pytest.approx(0.008 + 0.001)      # a whole chunk, when the rest slides out too


def test_of_two_micro_batch_workers_only_the_one_short_of_its_share_comes_back_when_room_for_one_send_frees(
        tmp_path: Path) -> None:
    """Two workers of a stream, both back from Spark's gap and saying sends of 25: "a" took most of the window,
    "b" little. Held back, "b" is told the moment room for one send frees; "a", over its fair share (half the
    limit), the moment a whole chunk does -- told the send's moment too, a greedy stream took the room as it freed
    from a trickle beside it that turned greedy."""
    answer = asker_at(tmp_path, send=25)
    for who in "ab":          # a first micro-batch each; each gives 10 back at its end; Spark's gap
        answer(0.0, 100, who=who)
    for who in "ab":
        answer(0.05, 0, returns=10, who=who)
    for who in "ab":
        assert answer(0.3, 30, who=who).msgs == 30
    for at in (0.303, 1.001):     # "a" takes the rest of the window, and the first micro-batches' as they slide out
        while answer(at, 250).msgs > 0:
            pass
    # the two 30s slide out at 1.3 s, "a"'s rest at 1.303 s
    assert answer(1.295, 200, who="b").retry_s == pytest.approx(0.005 + 0.001)
    assert answer(1.295, 200, who="a").retry_s == pytest.approx(0.008 + 0.001)


def test_a_micro_batch_worker_short_of_the_spends_bound_comes_back_when_that_frees_not_the_grants(
        tmp_path: Path) -> None:
    """Each grant of the catch-up is spent 5 ms after it came: the window's grants free its first chunk at 1.3 s,
    the spends' bound at 1.305 s. Told the grants' moment, the worker came back to a bound still full, and waited
    a poll more (a stream of half-window micro-batches lost that every window)."""
    clock = ManualClock()
    book = GrantBook(0.25, tmp_path, clock=clock.now_s)
    t0 = clock.now_s()

    def answer(at: float, wants: float, returns: float = 0.0, spent: tuple = ()):
        clock.advance(t0 + at - clock.now_s())
        ask = GrantAsk(level="resource_group", name="rg", direction="publish", wants_msgs=wants,
                       returns_msgs=returns, rate_msgs_per_s=LIMIT, held_msgs=0.0,
                       spent=[Spend(ago_s=round(at - s, 6), msgs=m) for s, m in spent])
        return book.answer("a", [ask], POLICIES)[0]
    first = answer(0.0, 100).msgs                     # a first micro-batch; Spark's gap; it is back at 0.3 s
    answer(0.05, 0, returns=10, spent=[(0.04, first - 10)])
    last: tuple = ()
    for at in (0.3, 0.31, 0.56, 0.81, 1.0):
        got = answer(at, 250, spent=last).msgs
        last = ((at + 0.005, got),)
    # the window is spent: at 1.29 s and 1.298 s the grants free the rest of the ask in 10 and 2 ms, the spends'
    # bound in 15 and 7 (and a millisecond); the first asks again at its poll, sooner than either
    at_129 = answer(1.29, 200, spent=last)
    at_1298 = answer(1.298, 200, spent=((1.295, at_129.msgs),))
    assert at_129.msgs < 200 and at_1298.msgs == 0
    assert [at_129.retry_s, at_1298.retry_s] == [pytest.approx(RETRY_MIN_S), pytest.approx(0.007 + 0.001)]


def give_back_in_debt(book: GrantBook, who: str, debt: float, spent: float) -> float:
    """``who``'s task ends owing ``debt``, having spent ``spent`` 10 ms ago: what the answer grants it."""
    return book.answer(who, [GrantAsk(level="resource_group", name="rg", direction="publish", held_msgs=-debt,
                                      spent=[Spend(ago_s=0.01, msgs=spent)])], POLICIES)[0].msgs


def test_a_micro_batch_worker_that_leaves_in_debt_is_granted_it_with_the_answer_to_its_give_back() -> None:
    """Its task's last send overdrew its pool by 15: the answer to its give-back grants those 15 (the window has
    room), so its pool is square and the window counts them now, not with its next task a micro-batch later. A
    batch job's worker, back with its next task within milliseconds, repays it with that task's first ask."""
    clock = ManualClock()
    book = GrantBook(0.25, clock=clock.now_s)

    def leave(who: str, debt: float) -> float:
        return give_back_in_debt(book, who, debt, spent=100.0 + debt)

    assert book.answer("a", ask(100), POLICIES)[0].msgs == 100
    clock.advance(0.1)
    assert leave("a", 0.0) == 0                        # its first micro-batch ends
    clock.advance(0.3)                                 # Spark's gap
    assert book.answer("a", ask(100), POLICIES)[0].msgs == 100
    clock.advance(0.1)
    assert leave("a", 15.0) == pytest.approx(15)       # a micro-batch worker now: repaid
    assert book.view()["limits"]["resource_group:publish:rg"]["grantedMsgs"] == pytest.approx(215)
    # a batch job's worker: never away long enough to be one (its debt waits for its next ask, a moment later)
    assert book.answer("b", ask(100), POLICIES)[0].msgs == 100
    clock.advance(0.05)
    assert leave("b", 10.0) == 0
    clock.advance(0.005)
    assert book.answer("b", ask(100), POLICIES)[0].msgs > 0
    clock.advance(0.05)
    assert leave("b", 10.0) == 0


def test_a_micro_batch_worker_that_leaves_in_debt_is_granted_it_even_where_the_window_is_full() -> None:
    """Sixteen workers of one stream end each micro-batch with the window full and a few in debt: granted with
    their next task instead, the debts filled that micro-batch's window and its own last sends overdrew in turn
    (0.949 of the limit). The answer to the give-back grants the debt, the window then over the limit by it, and
    grants nothing more until the window slides -- no more than the leaver reported spent in it."""
    clock = ManualClock()
    book = GrantBook(0.25, clock=clock.now_s)

    assert book.answer("a", ask(100), POLICIES)[0].msgs == 100
    clock.advance(0.1)
    assert give_back_in_debt(book, "a", 0.0, 100.0) == 0   # its first micro-batch ends
    clock.advance(0.3)                                  # Spark's gap
    drawn = 0.0
    for _ in range(20):                                 # the window's room, to the last token
        drawn += book.answer("a", ask(250), POLICIES)[0].msgs
        clock.advance(0.001)
    assert drawn == pytest.approx(LIMIT - 100)
    assert give_back_in_debt(book, "a", 12.0, drawn + 12.0) == pytest.approx(12)   # the window is full: repaid
    granted = book.view()["limits"]["resource_group:publish:rg"]["grantedMsgs"]
    assert granted == pytest.approx(LIMIT + 12)
    assert book.answer("b", ask(10), POLICIES)[0].msgs == 0     # nothing more until the window slides
    # a report of a debt beyond reason (a bug): no more than it reported spent in the window, 100 + 912 + 1
    assert give_back_in_debt(book, "a", 5000.0, 1.0) == pytest.approx(100 + drawn + 12 + 1)


def test_the_askers_of_a_stretched_limit_come_back_spread_over_its_spacing_each_at_its_own_moment(
        tmp_path: Path) -> None:
    # five busy limits on a budget of 100 asks a second: each is stretched to 40 a second, its 20 askers 0.5 s apart.
    # All 100 asked at the same instant (a stage's tasks start together): told to come back one spacing later, they
    # would all come back together again, every spacing
    clock = ManualClock()
    book = GrantBook(0.25, tmp_path, clock=clock.now_s, asks_budget_per_s=100)
    groups = [f"rg{i}" for i in range(5)]
    policies = PolicySet(version=1, resourceGroups={g: ResourceGroup(publishRateInMsgs=LIMIT) for g in groups})

    def asks(group: str, wants: float) -> list[GrantAsk]:
        return [GrantAsk(level="resource_group", name=group, direction="publish", wants_msgs=wants,
                         rate_msgs_per_s=LIMIT)]

    holders = [(f"worker-{i}", groups[i % 5]) for i in range(100)]
    for pid, group in holders:
        book.answer(pid, asks(group, 1), policies)
    clock.advance(0.2)
    now, cycle_s = clock.now_s(), 0.5 * (1 + OWN_MOMENT_LAG)
    back_at = []
    for pid, group in holders:
        grant = book.answer(pid, asks(group, LIMIT), policies)[0]
        assert grant.msgs < LIMIT and grant.asks_apart_s == pytest.approx(0.5)
        assert cycle_s / 2 <= grant.retry_s < 1.5 * cycle_s
        back_at.append((now + grant.retry_s, pid, group))
    tenths = Counter(int(at % cycle_s / cycle_s * 10) for at, _, _ in back_at)
    assert len(tenths) == 10 and min(tenths.values()) >= 4, tenths   # spread over the whole cycle
    for at, pid, group in sorted(back_at):   # each back at its moment: its next is one cycle on
        clock.advance(at - clock.now_s())
        assert book.answer(pid, asks(group, LIMIT), policies)[0].retry_s == pytest.approx(cycle_s)


def test_a_micro_batch_workers_chunk_is_its_share_among_the_streams_workers_a_few_of_its_sends(
        tmp_path: Path) -> None:
    # sixteen workers of a stream whose period is longer than a window: at a micro-batch's start none of them has
    # asked in the window, and the first askers were told chunks of 125-250 for tasks of 62 -- held until their
    # tasks ended, while the last tasks waited. Their share is among the stream's workers, and a chunk is three of
    # the sends they make (fair chunks of 15.6 drew a task in four or five asks), within that share
    clock = ManualClock()
    book = GrantBook(1.0, tmp_path, clock=clock.now_s)
    workers = [f"w{i}" for i in range(16)]

    def micro_batch(at: float) -> list:
        clock.advance(at - clock.now_s())
        answers = [book.answer(w, [GrantAsk(level="resource_group", name="rg", direction="publish",
                                            wants_msgs=250, rate_msgs_per_s=LIMIT, send_msgs=25)], POLICIES)[0]
                   for w in workers]
        clock.advance(0.2)
        for w, got in zip(workers, answers, strict=True):   # each task sent all it got; none is left to give back
            book.answer(w, [GrantAsk(level="resource_group", name="rg", direction="publish", held_msgs=0.0)],
                        POLICIES)
            assert got.msgs >= 0
        return answers
    micro_batch(0.0)
    micro_batch(1.5)          # away 1.3 s, longer than a window: micro-batch workers all the same
    first = micro_batch(3.0)[0]
    assert first.chunk_msgs == pytest.approx(LIMIT / 16) and first.msgs == pytest.approx(LIMIT / 16)


def test_a_micro_batch_worker_with_a_batch_in_hand_is_granted_it_and_its_debt_in_one_answer_and_no_more(
        tmp_path: Path) -> None:
    # a task of 62 rows drew three sends of 25, and held the rest until its keeper -- starved of the CPU by the
    # running tasks -- gave it back 0.3-0.5 s after the task's end, while the micro-batch's last sends waited. Told
    # what its producers have in hand, it is granted that and its debt, within its share
    clock = ManualClock()
    book = GrantBook(1.0, tmp_path, clock=clock.now_s)
    workers = [f"w{i}" for i in range(16)]

    def ask(worker: str, **fields: float) -> Grant:
        return book.answer(worker, [GrantAsk(level="resource_group", name="rg", direction="publish",
                                             rate_msgs_per_s=LIMIT, **fields)], POLICIES)[0]

    for at in (0.0, 1.5):   # two micro-batches: each worker is a micro-batch worker after them
        clock.advance(at - clock.now_s())
        for w in workers:
            ask(w, wants_msgs=62.5, send_msgs=25)
        clock.advance(0.2)
        for w in workers:
            ask(w, held_msgs=0.0)
    clock.advance(3.0 - clock.now_s())
    batch = ask("w0", wants_msgs=62.5, send_msgs=25, coming_msgs=40, held_msgs=-9.0)
    assert batch.msgs == pytest.approx(49.0)                 # 62.5 (three sends, within its share) without it
    assert batch.chunk_msgs == pytest.approx(LIMIT / 16)     # told its share: the next task's first ask
    large = ask("w1", wants_msgs=500.0, send_msgs=25, coming_msgs=500, held_msgs=0.0)
    assert large.msgs == pytest.approx(LIMIT / 16)           # within its share of the window
    last_send = ask("w2", wants_msgs=73.5, send_msgs=12, coming_msgs=12, held_msgs=-9.0)
    assert last_send.msgs == pytest.approx(21.0)             # three of its sends, 36, without it
    unknown = ask("w3", wants_msgs=73.5, send_msgs=12, held_msgs=-9.0)
    assert unknown.msgs == pytest.approx(36.0)               # (nothing said: three of its sends)


def test_an_ask_that_says_a_batch_of_no_number_is_refused_with_what_is_allowed() -> None:
    with pytest.raises(ValidationError, match=r"coming_msgs[\s\S]*must be >= 0, got -5"):
        GrantAsk(level="topic", name="a/b/c", direction="publish", wants_msgs=1, coming_msgs=-5)


def test_the_shares_of_some_limits_are_the_shares_of_all_restricted_to_them() -> None:
    # a view reads the book a few limits at a time (controlplane.views.shared_steps)
    clock = ManualClock()
    book = GrantBook(0.25, clock=clock.now_s)
    ps = PolicySet(version=1, resourceGroups={f"rg{i}": ResourceGroup(publishRateInMsgs=100.0 * (i + 1))
                                              for i in range(5)})
    for i in range(4):
        for pid in ("a", "b"):
            book.answer(pid, [GrantAsk(level="resource_group", name=f"rg{i}", direction="publish",
                                       wants_msgs=30.0 * (i + 1), rate_msgs_per_s=100.0 * (i + 1))], ps)
        clock.advance(0.05)
    keys = [f"resource_group:publish:rg{i}" for i in range(5)]
    assert book.limit_keys() == keys[:4]
    holders = {key: ["a", "b", "c"] for key in keys}
    whole = book.shares(holders, ps)
    some = book.shares({k: holders[k] for k in keys[1:]}, ps, keys=keys[1:])
    assert set(some) == set(keys[1:])
    assert all(some[k] == whole[k] for k in some)
    assert some["resource_group:publish:rg1"]["holders"]["a"]["msgs"]["granted"] > 0
    assert some["resource_group:publish:rg4"]["windowSeconds"] is None   # nobody asked: no window
