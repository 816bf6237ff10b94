"""limiter.grants.GrantWindow: never more than the capacity granted in any window; give-backs credited."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limiter.grants import DATED_BACK_S, DEFER_S, MADE_SLACK, WORKER_DATED_BACK_S, GrantWindow

pytestmark = pytest.mark.unit


def test_the_worked_example_of_the_essay() -> None:
    w = GrantWindow(1.0, burst_s=0.5)
    got = [w.grant("A", 250, 1000, 0.0, fair_chunk=250, rate_per_s=1000) for _ in range(3)]
    assert got == [250, 250, 0]                                        # the buckets' 500 at once (a gap caught up)
    assert w.grant("A", 250, 1000, 0.1, fair_chunk=250, rate_per_s=1000) == pytest.approx(100)   # then 1,000/s
    assert w.grant("B", 250, 1000, 0.4, fair_chunk=250, rate_per_s=1000) == pytest.approx(250)   # B joins
    assert w.fair_rate("A", 1000, 0.4) == pytest.approx(500) and w.fair_rate("B", 1000, 0.4) == pytest.approx(500)
    assert w.give_back("A", 120, 0.5) == 120                           # A's task ends
    assert w.fair_rate("B", 1000, 0.5) == pytest.approx(1000)          # B alone: the whole limit
    assert w.granted(0.5) == pytest.approx(730)


def test_each_holder_is_paced_to_its_max_min_fair_rate() -> None:
    w = GrantWindow(1.0, burst_s=0.5)
    got = {"A": 0.0, "B": 0.0, "C": 0.0}
    wants = {"A": 100, "B": 1000, "C": 1000}   # A wants 100/s: B and C split the other 900
    for i in range(1, 1001):
        t = i * 0.005
        for h in got:
            got[h] += w.grant(h, 10, 1000, t, fair_chunk=50, rate_per_s=wants[h])
    rates = {h: g / 5.0 for h, g in got.items()}
    assert rates["A"] <= 100 * 1.12                                     # what it wanted (+ its first burst)
    assert rates["B"] == pytest.approx(rates["C"], rel=0.05)
    assert sum(rates.values()) == pytest.approx(1000, rel=0.05)        # the limit, used


@pytest.mark.parametrize(("asks_apart_s", "per_ask"), [(0.0, 250), (0.5, 475)])
def test_holders_asked_far_apart_hold_twice_their_spacing(asks_apart_s: float, per_ask: float) -> None:
    # B's fair share of a 1,000 limit is 500 a second (A wants as much, and asks for a little every 0.1 s); back
    # 0.95 s later, a bucket of burst_s (0.5 s) holds 250 of it; spaced 0.5 s apart by the control plane, up to twice
    # that: the 475 refilled
    w = GrantWindow(1.0, burst_s=0.5)
    for i in range(11):
        w.grant("A", 10, 1000, i / 10, fair_chunk=1000, rate_per_s=2000, asks_apart_s=asks_apart_s)
        if i == 0:
            assert w.grant("B", 1000, 1000, 0.05, fair_chunk=1000, rate_per_s=2000,
                           asks_apart_s=asks_apart_s) == pytest.approx(250)   # its first: burst_s of its share
    assert w.fair_rate("B", 1000, 1.0) == pytest.approx(500)
    assert w.grant("B", 1000, 1000, 1.0, fair_chunk=1000, rate_per_s=2000,
                   asks_apart_s=asks_apart_s) == pytest.approx(per_ask)
    assert w.granted(1.0) <= 1000                                      # the window holds either way


def test_give_back_credits_only_what_the_holder_was_granted_in_the_window() -> None:
    w = GrantWindow(1.0)
    w.grant("A", 100, 1000, 0.0, fair_chunk=1000)
    w.grant("B", 200, 1000, 0.1, fair_chunk=1000)
    assert w.give_back("A", 500, 0.2) == 100
    assert w.granted(0.2) == pytest.approx(200)
    assert w.give_back("A", 50, 1.5) == 0   # its grants slid out of the window already


def test_entries_credited_to_nothing_slide_out_cleanly() -> None:
    w = GrantWindow(1.0)
    w.grant("A", 50, 1000, 0.0, fair_chunk=50)
    w.grant("A", 50, 1000, 0.1, fair_chunk=50)
    assert w.give_back("A", 50, 0.2) == 50          # the newest entry is credited down to nothing
    assert w.granted(1.05) == 0                       # the first slides out; then the empty one, without an error
    assert w.granted(1.2) == 0 and w.grant("A", 10, 1000, 1.2, fair_chunk=50) == 10


def test_a_capacity_cut_holds_once_the_window_slides() -> None:
    w = GrantWindow(1.0)
    for i in range(10):
        w.grant("A", 100, 1000, 0.1 * i, fair_chunk=100)
    assert w.granted(0.95) == pytest.approx(1000)
    assert w.grant("A", 100, 300, 0.95, fair_chunk=100) == 0
    assert w.retry_s(300, 0.95) == pytest.approx(0.75, abs=1e-9)   # down to 300 once 0.0..0.6 slid out
    # then its own bucket (half a second of the new rate, held while the window was spent) and the new rate
    assert w.grant("A", 100, 300, 1.75, fair_chunk=100) == pytest.approx(100)
    assert w.grant("A", 100, 300, 1.76, fair_chunk=100) == 0          # the window: 0.8, 0.9 and 1.75 make 300
    # once 0.8 slides out: the bucket's 50, plus its refill since the window stopped being spent (1.8)
    assert w.grant("A", 100, 300, 1.95, fair_chunk=100) == pytest.approx(50 + 0.15 * 300)


def test_one_holder_asking_at_its_fair_rate_gets_the_whole_limit() -> None:
    """Asks every 15-35 ms fill the window exactly: a moment of it spent (the grant a second ago slides out a
    little later) is jitter, not oversubscription, and must not cost the bucket its refill (it got 0.975)."""
    w = GrantWindow(1.0, burst_s=0.5)
    t, got, gaps = 0.0, 0.0, [0.02, 0.03, 0.025, 0.035, 0.015]
    for i in range(480):
        amount = w.grant("A", 10, 300, t, fair_chunk=75, rate_per_s=300)
        got += amount if t >= 2.0 else 0.0
        t += gaps[i % len(gaps)]
    assert got / (t - 2.0) >= 0.99 * 300


def test_learning_cap_paces_a_holder_at_its_fallback_rate_without_a_first_burst() -> None:
    w = GrantWindow(1.0)
    # it was spending at its fallback rate (300/s) until this ask: nothing on top at once
    assert w.grant("A", 400, 1000, 0.0, fair_chunk=1000, learning_cap=300) == 0
    assert w.grant("A", 400, 1000, 0.5, fair_chunk=1000, learning_cap=300) == pytest.approx(150)
    grants = [(0.5, 150.0)]
    for i in range(11, 60):          # asking every 50 ms: it gets 300/s, never more than 300 in a window
        t = i * 0.05
        grants.append((t, w.grant("A", 400, 1000, t, fair_chunk=1000, learning_cap=300)))
    assert sum(a for t, a in grants if t > 2.0) == pytest.approx(0.95 * 300, rel=0.02)
    for start in [g[0] for g in grants]:
        assert sum(a for t, a in grants if start <= t < start + 1.0) <= 300 + 1e-6
    # unheard for a window, it may have been spending its fallback rate all along: it starts empty again
    assert w.grant("A", 400, 1000, 10.0, fair_chunk=1000, learning_cap=300) == 0
    assert w.grant("A", 400, 1000, 10.5, fair_chunk=1000, learning_cap=300) == pytest.approx(150)


def test_learning_cap_gives_a_holder_back_from_a_gap_no_catch_up() -> None:
    # after a restart, A spent its fallback rate (500/s) until its first ask: its grants go on at that rate from
    # there, also when its micro-batch ends and the next starts (outside learning: a full bucket at once)
    w = GrantWindow(1.0)
    assert w.grant("A", 300, 1000, 0.0, fair_chunk=1000, learning_cap=500) == 0
    assert w.grant("A", 300, 1000, 0.02, fair_chunk=1000, learning_cap=500) == pytest.approx(10)
    w.give_back("A", 0.0, 0.1)
    assert w.grant("A", 300, 1000, 0.3, fair_chunk=1000, learning_cap=500) == pytest.approx(0.28 * 500)
    assert w.grant("A", 300, 1000, 0.35, fair_chunk=1000, learning_cap=500) == pytest.approx(0.05 * 500)
    # the same holder out of learning: back from its gap, a full bucket at once
    w = GrantWindow(1.0)
    w.grant("A", 300, 1000, 0.0, fair_chunk=1000, rate_per_s=500)
    w.give_back("A", 0.0, 0.1)
    assert w.grant("A", 1000, 1000, 0.3, fair_chunk=1000, rate_per_s=500) >= 0.5 * 500


def test_without_catch_up_a_holder_back_from_a_gap_is_paced_from_its_return() -> None:
    # an adaptive limit's window (a sink that refuses bursts): back from a 0.4-s gap, nothing refilled while away
    w = GrantWindow(1.0, 0.1, catch_up=False)
    assert w.grant("A", 1000, 1000, 0.0, fair_chunk=1000) == pytest.approx(100)    # a newcomer: 0.1 s of it
    assert w.grant("A", 1000, 1000, 0.5, fair_chunk=1000) == pytest.approx(100)
    w.give_back("A", 0.0, 0.55)
    assert w.grant("A", 1000, 1000, 0.95, fair_chunk=1000) == 0
    assert w.grant("A", 1000, 1000, 0.97, fair_chunk=1000) == pytest.approx(20)     # 0.02 s of 1,000/s
    # with catch-up (the default), the same return starts on a full bucket
    w = GrantWindow(1.0, 0.1)
    w.grant("A", 1000, 1000, 0.0, fair_chunk=1000)
    w.grant("A", 1000, 1000, 0.5, fair_chunk=1000)
    w.give_back("A", 0.0, 0.55)
    assert w.grant("A", 1000, 1000, 0.95, fair_chunk=1000) >= 100


@pytest.mark.parametrize("fell_back", [True, False])
def test_a_holder_that_ran_at_its_fallback_rate_is_paced_from_its_return(fell_back: bool) -> None:
    # alone at 1,000/s: a newcomer's half-second stock, then 300 refilled over 0.3 s
    w = GrantWindow(1.0)
    assert w.grant("A", 500, 1000, 0.0, fair_chunk=500) == pytest.approx(500)
    assert w.grant("A", 500, 1000, 0.3, fair_chunk=500) == pytest.approx(300)
    # back after 0.7 s: if its asks failed and it ran at its fallback rate meanwhile, paced from its return; if it
    # only stalled, it catches up its gap (a half-second stock)
    back = w.grant("A", 500, 1000, 1.0, fair_chunk=500, fell_back=fell_back)
    assert back == (0 if fell_back else pytest.approx(500))
    assert w.grant("A", 500, 1000, 1.05, fair_chunk=500) == pytest.approx(50)
    # away past the window (its bucket forgotten): no newcomer's stock either
    w = GrantWindow(1.0)
    w.grant("A", 500, 1000, 0.0, fair_chunk=500)
    assert w.grant("A", 500, 1000, 1.6, fair_chunk=500, fell_back=fell_back) == (0 if fell_back else pytest.approx(500))
    # nor a micro-batch worker's catch-up after a give-back (else a chunk of it at once)
    w = GrantWindow(1.0)
    w.grant("A", 500, 1000, 0.0, fair_chunk=500)
    w.give_back("A", 100, 0.2)
    assert w.grant("A", 500, 1000, 0.6, fair_chunk=500, fell_back=fell_back) == (0 if fell_back else pytest.approx(500))


def test_askers_count_the_holders_of_the_last_window() -> None:
    w = GrantWindow(1.0)
    w.grant("A", 1, 10, 0.0, fair_chunk=1)
    w.grant("B", 1, 10, 0.5, fair_chunk=1)
    assert w.askers(0.9) == 2
    assert w.askers(1.2) == 1


@pytest.mark.parametrize("bad", [-1, float("nan"), True, "1"])
def test_bad_amounts_are_refused_with_what_is_allowed(bad: object) -> None:
    w = GrantWindow(1.0)
    with pytest.raises(ValueError, match=r"must be a number >= 0"):
        w.grant("A", bad, 10, 0.0, fair_chunk=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"window_s must be a finite number of seconds > 0"):
        GrantWindow(0)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ABCD"), st.floats(0, 400), st.floats(0, 0.2), st.floats(1, 2000),
                          st.one_of(st.none(), st.floats(0, 400))),
                min_size=1, max_size=150),
       st.sampled_from([0.5, 1.0, 2.0]), st.floats(100, 5000))
def test_no_window_ever_holds_more_than_the_capacity(steps: list, window_s: float, capacity: float) -> None:
    """Whatever the asks, give-backs, chunks and timing: the grants returned in any window (less what was given
    back of them), less the part of it a grant of room that came free may be dated back (``DATED_BACK_S``, a
    micro-batch worker's ``WORKER_DATED_BACK_S``), add up to <= capacity, and in any whole window to <= capacity and
    MADE_SLACK of it (checked from the returned amounts and the moments they were returned alone, not from the
    table's own bookkeeping)."""
    w = GrantWindow(window_s)
    now, granted = 0.0, []
    span_s = window_s * (1 - max(DATED_BACK_S, WORKER_DATED_BACK_S))
    for holder, amount, dt, chunk, gives_back in steps:
        now += dt
        if gives_back is not None:   # its task ends: what it gives back is taken off its newest grants
            credited = w.give_back(holder, gives_back, now)
            assert 0 <= credited <= gives_back
            for entry in reversed(granted):
                if entry[1] == holder and entry[0] > now - window_s and credited > 0:
                    take = min(entry[2], credited)
                    entry[2], credited = entry[2] - take, credited - take
            assert credited <= 1e-9   # (all of it came off grants the window still held)
        got = w.grant(holder, amount, capacity, now, fair_chunk=chunk, rate_per_s=amount * 4)
        assert 0 <= got <= min(amount, chunk)
        granted.append([now, holder, got])
        in_window = sum(g for t, _, g in granted if t > now - span_s)
        assert in_window <= capacity * (1 + 1e-9)
        in_whole_window = sum(g for t, _, g in granted if t > now - window_s)
        assert in_whole_window <= capacity * (1 + MADE_SLACK) * (1 + 1e-9)


def test_holders_remember_five_windows_and_forget_who_leaves() -> None:
    w = GrantWindow(1.0)
    w.grant("A", 10, 1000, 0.0, fair_chunk=10)
    w.grant("B", 10, 1000, 2.0, fair_chunk=10)
    assert w.askers(2.0) == 1 and w.holders(2.0) == 2       # A sat out the last window: still a holder
    w.give_back("B", 0, 2.5)                                # B's task ended: back with the next, still counted
    assert w.holders(2.5) == 2
    assert w.holders(5.5) == 1                              # A's ask is five windows old
    w.leave("B")                                            # B's participant said goodbye
    assert w.holders(5.5) == 0


def test_a_holder_that_wants_a_different_rate_moves_the_fair_rates_at_once() -> None:
    w = GrantWindow(1.0)
    w.grant("a", 10, 1000, 0.0, fair_chunk=10, rate_per_s=100)
    w.grant("b", 10, 1000, 0.0, fair_chunk=10, rate_per_s=1000)
    assert w.fair_rate("b", 1000, 0.0) == pytest.approx(900)
    w.grant("a", 10, 1000, 0.001, fair_chunk=10, rate_per_s=1000)   # within the level's refresh time
    assert w.fair_rate("b", 1000, 0.001) == pytest.approx(500)


def test_expired_askers_leave_oldest_first_whatever_order_they_asked_again_in() -> None:
    w = GrantWindow(1.0)
    for t, holder in ((0.0, "a"), (0.1, "b"), (0.2, "c"), (0.5, "a")):   # a asks again: now the newest
        w.grant(holder, 1, 1000, t, fair_chunk=1)
    assert w.askers(1.15) == 2                       # b's ask slid out, a's second and c's stay
    assert w.askers(1.3) == 1 and w.asked("a")
    assert w.holders(1.3) == 3                       # the safe split still counts the last five windows
    assert w.holders(5.15) == 2 and w.holders(5.55) == 0


def _micro_batch_stream(w: GrantWindow, rows: int, gaps_s: list[float], until_s: float,
                        beats_s: tuple[float, ...] = (0.01,)) -> list[tuple[float, float]]:
    """One worker running micro-batches of ``rows`` at a limit of 1,000/s, asking every ``beats_s`` (in turn) for
    what is left (at most 50), its task giving back at the end of each batch and the next starting after Spark's
    gap."""
    granted, left, resume_at, batch, t, i = [], float(rows), 0.0, 0, 0.0, 0
    while t < until_s:
        if t >= resume_at:
            got = w.grant("A", min(left, 50), 1000, t, fair_chunk=50, rate_per_s=1000)
            if got:
                granted.append((t, got))
                left -= got
            if left <= 1e-9:
                w.give_back("A", 0, t)
                resume_at, left, batch = t + gaps_s[batch % len(gaps_s)], float(rows), batch + 1
        t, i = round(t + beats_s[i % len(beats_s)], 6), i + 1
    return granted


def _most_in_any(granted: list[tuple[float, float]], span_s: float, starts: list[float]) -> float:
    """The most granted in any span of ``span_s`` starting at one of ``starts``."""
    return max(sum(a for t, a in granted if s <= t < s + span_s) for s in starts)


@pytest.mark.parametrize("rows", [2000, 6000])
def test_a_micro_batch_stream_catches_up_spark_gaps_every_window(rows: int) -> None:
    """The catch-up at a micro-batch's start leaves a pause one window later; refilling through it, the worker's
    pattern recurs every window and Spark's next gap falls into a pause (without: 2,000 rows 0.88, 6,000 0.96). Its
    grants of room that came free are dated back to then, up to half a window: a window's part as long as what is
    left of it holds at most the limit, a whole window the limit and its slack (where room freed while it was away
    is dated back across the window's start: 1,050 in 0.9 of a window here; 1,000 dated back no further than an
    ask's lag)."""
    gaps_s = [0.25, 0.18, 0.31, 0.22, 0.34, 0.2, 0.27, 0.15]
    granted = _micro_batch_stream(GrantWindow(1.0, burst_s=0.5), rows, gaps_s, until_s=40.0)
    steady = [(t, a) for t, a in granted if 8.0 <= t < 38.0]
    assert sum(a for _, a in steady) / 30_000 >= 0.98
    starts = [8.0 + 0.01 * i for i in range(2900)]
    assert _most_in_any(steady, 1.0 - WORKER_DATED_BACK_S, starts) <= 1000 + 1e-6
    assert _most_in_any(steady, 1.0, starts) <= 1000 * (1 + MADE_SLACK) + 1e-6


def test_a_steady_holder_does_not_echo_a_spent_window() -> None:
    """One that never left keeps the pause: 500 caught up at once by a newcomer come back as its refill, not as a
    second burst when they slide out (steady holders whose shares move would swing around them)."""
    w = GrantWindow(1.0, burst_s=0.5)
    assert w.grant("A", 500, 1000, 0.0, fair_chunk=500, rate_per_s=1000) == 500
    t, got = 0.01, 0.0
    while t < 1.0:
        got += w.grant("A", 50, 1000, t, fair_chunk=50, rate_per_s=1000)
        t = round(t + 0.01, 6)
    assert got == pytest.approx(500, abs=20)               # the window is spent from ~0.5 s
    assert w.grant("A", 500, 1000, 1.01, fair_chunk=500, rate_per_s=1000) <= 30   # no burst as the 500 slide out


def test_a_window_pickled_before_a_field_existed_still_grants() -> None:
    import pickle

    w = GrantWindow(1.0)
    w.grant("A", 100, 1000, 0.0, fair_chunk=100)
    old = dict(w.__dict__)
    del old["_returned"], old["_overhang"], old["_overhang_total"]   # as an earlier release wrote it
    old["_log"] = type(w._log)(entry[:3] for entry in w._log)          # (its entries had no moment made)
    revived = GrantWindow.__new__(GrantWindow)
    revived.__setstate__(old)
    assert revived.granted(0.5) == pytest.approx(100)
    assert revived.grant("A", 100, 1000, 0.5, fair_chunk=100) > 0
    assert revived.granted(1.2) > 0 and revived.granted(1.6) == 0     # the old entry slides out as it should
    assert pickle.loads(pickle.dumps(revived)).granted(0.5) == revived.granted(0.5)


def test_a_batch_workers_next_task_at_once_does_not_echo_a_spent_window() -> None:
    """Back within milliseconds (a batch job's next short task) is no gap of Spark's: no echo either."""
    w = GrantWindow(1.0, burst_s=0.5)
    assert w.grant("A", 500, 1000, 0.0, fair_chunk=500, rate_per_s=1000) == 500
    t = 0.01
    while t < 1.0:
        w.grant("A", 50, 1000, t, fair_chunk=50, rate_per_s=1000)
        if round(t * 100) % 10 == 0:     # a task ends every 100 ms; the next starts 5 ms later
            w.give_back("A", 0, t)
            t = round(t + 0.005, 6)
        t = round(t + 0.01, 6)
    assert w.grant("A", 500, 1000, 1.01, fair_chunk=500, rate_per_s=1000) <= 30


@pytest.mark.parametrize("spent_before", [False, True])
def test_only_a_holder_that_sent_before_its_gap_echoes_a_spent_window(spent_before: bool) -> None:
    """A participant that asked ahead of any work (waiting to be ready) and gave it all back is no micro-batch
    worker: its catch-up pauses the window once, like a steady holder's. One that sent before its gap echoes."""
    w = GrantWindow(1.0, burst_s=0.5)
    assert w.grant("A", 250, 1000, 0.0, fair_chunk=250, rate_per_s=1000) == 250
    w.give_back("A", 50 if spent_before else 250, 0.6)
    t, got = 1.1, 0.0
    while t < 2.1:
        got += w.grant("A", 50, 1000, t, fair_chunk=50, rate_per_s=1000)
        t = round(t + 0.01, 6)
    assert got <= 1000 + 1e-6
    burst = sum(w.grant("A", 50, 1000, round(2.11 + 0.01 * i, 6), fair_chunk=50, rate_per_s=1000)
                for i in range(5))        # the catch-up at 1.1 s slides out
    if spent_before:
        assert burst >= 150               # its bucket refilled through the pause: the catch-up recurs
    else:
        assert burst <= 80                # at its fair rate (50 in 50 ms) and what its bucket held


def test_a_worker_that_gives_back_its_last_chunk_whole_after_spending_others_still_echoes() -> None:
    """At a cut limit a stream's worker may give back the one chunk the window holds of it whole, having spent the
    ones before (slid out): it is a micro-batch worker all the same, and its pause echoes."""
    w = GrantWindow(1.0, burst_s=1.0)
    assert w.grant("A", 300, 300, 0.0, fair_chunk=300, rate_per_s=300) == 300     # spent
    assert all(w.grant("A", 50, 300, t, fair_chunk=50, rate_per_s=300) == 0 for t in (0.3, 0.6, 0.9))
    last = w.grant("A", 50, 300, 1.01, fair_chunk=50, rate_per_s=300)
    w.give_back("A", last, 1.05)                    # its task ends: that chunk back whole
    t = 1.3                                         # the next micro-batch, after Spark's gap
    while t < 2.3:
        w.grant("A", 50, 300, t, fair_chunk=50, rate_per_s=300)
        t = round(t + 0.01, 6)
    burst = sum(w.grant("A", 50, 300, round(2.31 + 0.01 * i, 6), fair_chunk=50, rate_per_s=300) for i in range(5))
    assert burst >= 90      # its catch-up recurs as it slides out (without the echo: 18, its refill alone)


def test_a_micro_batch_workers_catch_up_lasts_through_the_asks_that_draw_it() -> None:
    """Back from Spark's gap, a worker may catch up what its bucket refilled while it was away (up to a window of
    its fair rate), a chunk an ask. Cut to ``burst_s`` after the first ask, the catch-up ended early: the
    micro-batch's last rows waited for the window to slide, and Spark's next gap came on top of that wait."""
    w = GrantWindow(1.0, burst_s=0.5)
    assert w.grant("A", 250, 1000, 0.0, fair_chunk=250, rate_per_s=1000) == 250
    w.give_back("A", 50, 0.2)                           # its micro-batch ends, having sent 200
    drawn = sum(w.grant("A", 100, 1000, 0.5, fair_chunk=100, rate_per_s=1000) for _ in range(10))
    # its bucket: 250 left + 0.5 s of refill (600 when cut), and the window's room beyond it (no one else is owed)
    assert drawn == pytest.approx(800)
    assert w.granted(0.5) <= 1000 + 1e-6
    # one that never left keeps burst_s: its stock above it is not kept
    w2 = GrantWindow(1.0, burst_s=0.5)
    assert sum(w2.grant("B", 100, 1000, 0.0, fair_chunk=100, rate_per_s=1000) for _ in range(10)) == \
        pytest.approx(500)


def test_a_micro_batch_worker_away_for_longer_than_a_window_is_one_all_the_same() -> None:
    """A stream whose period is longer than a window (a driver that commits each micro-batch, a busy host): each
    worker runs a task of a few tenths of a second and is away for over a window. It comes back to a newcomer's
    bucket, but as a micro-batch worker -- it takes the window's room, and its debt is repaid when it leaves (taken
    for a newcomer, it repaid it with its next task's first grants, the window full of them at the micro-batch's
    end). Not one that gave back all it was granted (it asked ahead of any work), nor one away for longer than
    ``RETURNING_WINDOWS`` windows, nor one that said goodbye."""
    w = GrantWindow(1.0, burst_s=0.5)
    for holder in ("A", "B", "C", "D"):
        assert w.grant(holder, 60, 1000, 0.0, fair_chunk=60, rate_per_s=1000) == 60
    w.give_back("A", 0, 0.3)        # sent all of it
    w.give_back("B", 60, 0.3)       # sent none of it
    w.give_back("C", 0, 0.3)
    w.give_back("D", 0, 0.3)
    w.leave("D")                    # its participant said goodbye
    assert w.grant("A", 600, 1000, 1.7, fair_chunk=600, rate_per_s=1000) == 600   # the window's room, not 500
    assert w.returning("A", 1.7) and w.micro_batch_workers(1.7) == 1
    # a newcomer: its bucket alone, half a second of its fair 500 a second
    assert w.grant("B", 600, 1000, 1.7, fair_chunk=600, rate_per_s=1000) == pytest.approx(250)
    assert not w.returning("B", 1.7)
    w.grant("D", 10, 1000, 1.7, fair_chunk=10, rate_per_s=1000)
    assert not w.returning("D", 1.7)
    assert not w.returning("C", 12.0)
    w.grant("C", 10, 1000, 12.0, fair_chunk=10, rate_per_s=1000)   # back after eleven windows: a newcomer
    assert not w.returning("C", 12.0)


def test_a_leaver_in_debt_is_granted_it_at_once_even_beyond_the_window() -> None:
    """A task's last send overdrew its pool: the debt is granted at the give-back, not at the worker's next task --
    the spends were made, and the window counted them late, full a micro-batch later while the sends it had seen
    left room (a stream of half-window micro-batches, simulated: 0.979 -> 0.983). Granted even where the window is
    full: repaid with the next micro-batch's first grants, the debt filled that micro-batch's window and its own
    last sends overdrew again (16 workers of one stream: 0.949 of the limit -> 0.988). Never more than the leaver
    spent in the window."""
    w = GrantWindow(1.0)
    assert w.grant("A", 500, 1000, 0.0, fair_chunk=500) == 500
    w.report("A", -524.0, [(0.1, 1024.0)], 0.3)     # spent all of it and 524 more: its sends overdrew the pool
    w.give_back("A", 0, 0.3)
    assert w.repay("A", 24.0, 1000, 0.3) == 24.0
    assert w.granted(0.3) == pytest.approx(524) and w.granted_to("A", 0.3) == pytest.approx(524)
    assert w.repay("A", 500.0, 1000, 0.3) == 500.0                     # beyond the window: the window is over it
    assert w.granted(0.3) == pytest.approx(1024)
    assert w.grant("B", 10, 1000, 0.35, fair_chunk=10) == 0.0          # ... and grants nothing new
    assert w.retry_s(1000, 0.35) == pytest.approx(0.65)               # until the first grant (500) slides out
    assert w.repay("A", 5000.0, 1000, 0.3) == 1024.0                   # no more than it spent in the window
    assert w.repay("C", 10.0, 1000, 0.3) == 0.0                        # one that reported no spends: nothing
    with pytest.raises(ValueError, match="debt"):
        w.repay("A", -1.0, 1000, 0.3)


def test_a_grant_is_dated_back_only_to_when_the_room_it_takes_came_free() -> None:
    """Room that came free as a grant slid out, taken by the next ask 20 ms later, counts from when it came free;
    room that was there before, or came from a give-back, counts from the ask. A give-back of nothing (a task
    that ended with its pool spent, every micro-batch) changes no room, and dates nothing later."""
    freed = GrantWindow(1.0, burst_s=1.0)
    freed.grant("A", 100, 100, 0.0, fair_chunk=100)                 # the window is full until 1.0
    assert freed.grant("B", 30, 100, 1.02, fair_chunk=100) == 30
    assert freed.granted(1.99) == 30 and freed.granted(2.0) == 0     # dated 1.0: out a window after it came free

    spare = GrantWindow(1.0, burst_s=1.0)
    spare.grant("A", 50, 100, 0.0, fair_chunk=100)                  # half the window: room all along
    assert spare.grant("B", 30, 100, 1.02, fair_chunk=100) == 30
    assert spare.granted(2.01) == 30 and spare.granted(2.02) == 0    # dated at the ask

    for wants, later in ((30, 0), (70, 10)):
        given = GrantWindow(1.0, burst_s=1.0)
        given.grant("A", 60, 100, 0.0, fair_chunk=100)
        given.grant("D", 40, 100, 0.5, fair_chunk=100)               # the window is full until 1.0
        given.give_back("C", 0, 1.005)                                # (a task that ended with nothing left)
        assert given.give_back("D", 40, 1.01) == 40                   # D's task ends: its 40 are free again
        assert given.grant("B", wants, 100, 1.02, fair_chunk=100) == wants
        # 30 fit in what came free at 1.0 (dated then); of 70, the 60 that came free at 1.0 are dated then, and the
        # 10 beyond them take of the 40 given back at 1.01 (dated at the ask)
        assert given.granted(1.999) == wants and given.granted(2.0) == later
        assert given.granted(2.019) == later and given.granted(2.02) == 0


def test_room_that_came_free_from_several_grants_is_dated_part_by_part() -> None:
    """An ask that takes the room two grants left as they slid out, 10 ms apart: each part counts from when its own
    room came free, so each token's round stays the window. Dated whole at the newer moment, the older grant's 50
    would take the window and those 10 ms every round."""
    window = GrantWindow(1.0, burst_s=1.0)
    window.grant("A", 50, 100, 0.0, fair_chunk=100)
    window.grant("B", 50, 100, 0.01, fair_chunk=100)              # full until 1.0, then 1.01
    assert window.grant("C", 100, 100, 1.02, fair_chunk=100) == 100
    assert window.granted(1.999) == 100
    assert window.granted(2.0) == 50 and window.granted(2.009) == 50   # A's room: out a window after 1.0
    assert window.granted(2.011) == 0                                  # B's: a window after 1.01
    # an ask for less than the older room: all of it counts from then, the moment it fitted
    again = GrantWindow(1.0, burst_s=1.0)
    again.grant("A", 50, 100, 0.0, fair_chunk=100)
    again.grant("B", 50, 100, 0.01, fair_chunk=100)
    assert again.grant("C", 30, 100, 1.02, fair_chunk=100) == 30
    assert again.granted(1.999) == 30 and again.granted(2.0) == 0


@pytest.mark.parametrize("made_slack", [MADE_SLACK, 0.02])
def test_the_grants_made_in_any_window_hold_the_limit_and_its_slack_however_they_are_dated(
        made_slack: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grant dated back (its room came free 20 ms before the ask) is sent when it is made: the room it takes comes
    free again a window after it is dated, and an ask right then gets only what keeps the grants *made* in the
    window within the limit and MADE_SLACK of it -- not the whole room, which would let the window of sends from
    the first ask on hold the limit twice over its 100. MADE_SLACK is that bound's own knob (the spends' slack,
    HELD_SLACK, stays as it is)."""
    monkeypatch.setattr("limiter.grants.MADE_SLACK", made_slack)
    window = GrantWindow(1.0, burst_s=1.0)
    assert window.grant("A", 100, 100, 0.0, fair_chunk=100) == 100
    assert window.grant("B", 100, 100, 1.02, fair_chunk=100) == 100     # dated 1.0, made at 1.02
    assert window.granted(1.999) == 100 and window.granted(2.0) == 0     # out of the window a window after 1.0
    slack = 100 * made_slack
    assert window.grant("A", 100, 100, 2.0, fair_chunk=100) == pytest.approx(slack)
    assert window.frees_s("A", 100, 2.0, pending=90) == pytest.approx(0.02)   # the 100 made at 1.02 leave then
    assert window.frees_s("A", 100, 2.02, pending=100 - slack - 1e-6) == 0   # then the whole room is free again


def test_a_micro_batch_stream_asking_at_the_keepers_beat_gets_the_whole_limit() -> None:
    """The keeper asks every ~20 ms, so the room a grant leaves when it slides out waits up to a beat for the next
    ask. Dated at the ask, every token's round took the window and that lag: 0.996 of the limit in this run. Dated
    back to when the room came free: the whole limit, no span of the window less ``WORKER_DATED_BACK_S`` above it,
    and no window above it by more than its slack."""
    gaps_s = [0.25, 0.18, 0.31, 0.22, 0.34, 0.2, 0.27, 0.15]
    beats_s = (0.021, 0.019, 0.023, 0.017, 0.022, 0.018, 0.0205)
    granted = _micro_batch_stream(GrantWindow(1.0, burst_s=0.5), 2000, gaps_s, until_s=40.0, beats_s=beats_s)
    steady = [(t, a) for t, a in granted if 8.0 <= t < 38.0]
    assert sum(a for _, a in steady) / 30_000 >= 0.999
    starts = [8.0 + 0.01 * i for i in range(2900)]
    assert _most_in_any(steady, 1.0 - WORKER_DATED_BACK_S, starts) <= 1000 + 1e-6
    assert _most_in_any(steady, 1.0, starts) <= 1000 * (1 + MADE_SLACK) + 1e-6


@pytest.mark.parametrize("case", ["small", "new", "not small", "beside a steady holder", "grown"])
def test_a_small_holder_beside_a_hungry_micro_batch_worker_waits_a_moment_for_its_grant(case: str) -> None:
    """B asks for 50 just after micro-batch worker A was answered short, with room in the window (C gave some
    back): a small B -- asking for a window or more, granted at most a quarter of what A was in the window, and
    saying it wants less than the limit -- gets nothing, and A takes that room, until B has waited ``DEFER_S`` of
    the window; then B is served. B new (its first window), B granted as much as A, A a steady holder (never away),
    or B grown (it said it wants the whole limit in every ask of the last two windows): B is served at once."""
    w = GrantWindow(1.0, burst_s=1.0)
    if case == "grown":
        w.grant("B", 25, 1000, -2.5, fair_chunk=25, rate_per_s=100)
        w.grant("B", 25, 1000, -1.5, fair_chunk=25, rate_per_s=1000)
    elif case != "new":
        assert w.grant("B", 25, 1000, -1.5, fair_chunk=25, rate_per_s=100) == 25   # (slid out by now)
    b_had = 100 if case == "not small" else 0
    assert w.grant("C", 900 - b_had, 1000, 0.0, fair_chunk=900, rate_per_s=1000) == 900 - b_had
    w.grant("C", 0, 1000, 0.001, fair_chunk=900, rate_per_s=100)   # C, B: 100/s each -- A's bucket refills at 800
    if b_had:
        assert w.grant("B", b_had, 1000, 0.0, fair_chunk=b_had, rate_per_s=1000) == b_had
    assert w.grant("A", 100, 1000, 0.0, fair_chunk=100, rate_per_s=1000) == 100
    if case != "beside a steady holder":
        w.give_back("A", 50, 0.1)      # its task ends having sent 50; back after Spark's gap
    assert w.grant("A", 100, 1000, 0.3, fair_chunk=100, rate_per_s=1000) < 100     # short: the window is full
    w.give_back("C", 200, 0.305)       # room
    first = w.grant("B", 50, 1000, 0.31, fair_chunk=50, rate_per_s=1000 if case == "grown" else 100)
    if case != "small":
        assert first == 50
        return
    assert first == 0
    assert w.grant("A", 300, 1000, 0.32, fair_chunk=300, rate_per_s=1000) == 200   # the room is A's meanwhile
    t, waited = 0.33, []
    while t < 0.37 + DEFER_S:      # C gives back 8 before A's ask (A short of 100) and 8 before B's, every 20 ms
        w.give_back("C", 8, t)
        # A takes what B does not: the 8 before its ask, and the 8 before B's last (its bucket refills 16)
        assert w.grant("A", 100, 1000, round(t + 0.001, 6), fair_chunk=100, rate_per_s=1000) in (8, 16)
        w.give_back("C", 8, round(t + 0.002, 6))
        waited.append((round(t + 0.003 - 0.31, 3), w.grant("B", 50, 1000, round(t + 0.003, 6), fair_chunk=50,
                                                             rate_per_s=100)))
        t = round(t + 0.02, 6)
    assert all(got == 0 for after, got in waited if after < DEFER_S)
    # waited long enough: served, and not kept waiting again so soon
    assert all(got == pytest.approx(8) for after, got in waited if after >= DEFER_S) and waited[-1][0] > DEFER_S
