"""limiter.spent.SpentWindow and the bound it adds to GrantWindow: a window of consumption, not only of grants."""

from __future__ import annotations

import pytest

from limiter.grants import HELD_SLACK, GrantWindow
from limiter.spent import SpentWindow

pytestmark = pytest.mark.unit


def test_spends_count_from_when_they_were_spent_and_slide_out_a_window_later() -> None:
    w = SpentWindow(1.0)
    w.report("A", 0, [(0.2, 100), (0.5, 50)], now_s=0.6)
    assert w.counted(0.6) == 150
    assert w.counted(1.25) == 50          # the spend of 0.2 s slid out at 1.2 s
    assert w.counted(1.55) == 0


def test_an_idle_holder_counts_what_it_holds_and_is_granted_a_spending_one_only_its_spends() -> None:
    w = SpentWindow(1.0)
    w.report("idle", 150, [], now_s=0.4)           # spent nothing since its last report: it may burst
    w.granted("idle", 50)
    w.report("busy", 80, [(0.38, 20)], now_s=0.4)   # spends as it goes: its stock comes back as spends
    w.granted("busy", 30)                           # (held until its next report)
    assert w.held("idle") == 200 and w.held("busy") == 0
    assert w.counted(0.4) == pytest.approx(200 + 20)
    w.report("busy", 0, [(0.45, 110)], now_s=0.5)
    assert w.counted(0.5) == pytest.approx(200 + 130)


def test_a_holder_silent_for_a_window_is_gone_and_what_it_held_with_it() -> None:
    w = SpentWindow(1.0)
    w.report("A", 300, [], now_s=0.0)
    assert w.counted(0.9) == 300
    assert w.counted(1.01) == 0 and w.held("A") == 0


def test_a_debt_counts_as_nothing_held_and_spends_are_kept_in_time_order() -> None:
    w = SpentWindow(1.0)
    w.report("A", -75, [(0.5, 100)], now_s=0.5)
    w.report("B", 0, [(0.45, 10)], now_s=0.5)      # older than A's newest: inserted before it
    assert w.counted(0.5) == 110
    assert w.counted(1.47) == 100                  # B's slid out first


def test_a_sole_spenders_debt_may_be_repaid_beyond_the_bound_and_no_one_elses() -> None:
    w = SpentWindow(1.0)
    w.report("A", -90, [(0.1, 100), (0.5, 100)], now_s=0.5)   # two acquires of 100 in the window, 90 owed
    assert w.counted(0.5) == 200 and w.excusable("A", 0.5) == 90
    w.granted("A", 60)
    assert w.excusable("A", 0.5) == 30
    w.report("B", 0, [(0.55, 10)], now_s=0.6)                 # another spender: every holder could overdraw at once
    assert w.excusable("A", 0.6) == 0
    assert w.excusable("A", 1.56) == 30                       # B's spend slid out: A is alone again
    w.report("A", 5, [], now_s=1.6)                           # repaid: nothing owed
    assert w.excusable("A", 1.6) == 0


def test_an_idle_holder_is_a_spender_too() -> None:
    w = SpentWindow(1.0)
    w.report("A", -50, [(0.1, 100)], now_s=0.1)
    w.report("idle", 200, [], now_s=0.2)                      # may spend its 200 at once
    assert w.excusable("A", 0.3) == 0


def test_a_sole_spender_with_acquires_large_beside_the_limit_gets_the_limit() -> None:
    """100 a send at 150/s, alone: the spends' bound (157.5) held it to one send a second before its debts were
    excused; its own bucket and the window's grants still hold every window to the limit plus the send."""
    w = GrantWindow(1.0)
    balance, sends, t = 0.0, [], 0.0
    while t < 20.0:
        if balance > 0:                  # Pulsar's rule: it sends while it holds anything, and owes the rest
            balance -= 100
            sends.append(t)
            w.report("A", balance, [(t, 100)], t)
        else:
            w.report("A", balance, [], t)
        balance += w.grant("A", 37.5 - min(balance, 0.0), 150, t, fair_chunk=37.5, rate_per_s=150)
        t = round(t + 0.01, 2)
    late = [s for s in sends if s >= 2.0]
    assert len(late) * 100 / 18 >= 0.97 * 150
    assert max(sum(1 for s in late if a <= s < a + 1.0) for a in late) * 100 <= 150 * (1 + HELD_SLACK) + 100


@pytest.mark.parametrize("held, spent, error", [
    (float("nan"), [], "held must be a finite number"),
    (10, [(0.1, -5)], "a spend must be a finite number of tokens >= 0"),
    (10, [(0.1, float("inf"))], "a spend must be a finite number of tokens >= 0"),
])
def test_bad_reports_are_refused_with_what_is_allowed(held: float, spent: list, error: str) -> None:
    w = SpentWindow(1.0)
    with pytest.raises(ValueError, match=error):
        w.report("A", held, spent, now_s=0.2)


def _grants_to_b(report: bool) -> float:
    """A holds 300 through a gap and spends them at once at 1.1 s; B asks all along and spends what it gets at
    once (reporting it, when ``report``: each report says what the last grant was spent)."""
    w = GrantWindow(1.0, burst_s=1.0)
    assert w.grant("A", 300, 1000, 0.3, fair_chunk=1000, rate_per_s=1000) == 300
    if report:
        w.report("A", 300, [], 0.4)
        w.report("A", 0, [(1.1, 300)], 1.1)
    got, t, last = 0.0, 1.1, None
    for i in range(1, 101):
        t = 1.1 + 0.01 * i
        if report:
            w.report("B", 0, [last] if last else [], t)
        amount = w.grant("B", 10, 1000, t, fair_chunk=10, rate_per_s=1000)
        last = (t, amount) if amount > 0 else None
        got += amount
    return got


def test_tokens_held_through_a_gap_count_in_the_window_they_are_spent_in() -> None:
    # counted when granted, A's 300 slid out at 1.3 s: the second from 1.1 s holds them and 1,000 more
    assert _grants_to_b(report=False) == pytest.approx(1000, abs=1)
    # counted when spent: that second holds at most the limit and HELD_SLACK of it (and B's last, unreported grant)
    assert _grants_to_b(report=True) == pytest.approx(1000 * (1 + HELD_SLACK) - 300 + 10, abs=1)


def test_a_holder_back_from_a_gap_catches_it_up_to_a_window_of_its_share() -> None:
    w = GrantWindow(1.0, burst_s=0.5)
    for i in range(10):   # alone, steady at its limit
        w.grant("A", 100, 1000, 0.1 * i, fair_chunk=1000, rate_per_s=1000)
    w.give_back("A", 0, 0.95)                       # its task ended
    # back 0.9 s after its last grant: 0.9 s of its fair rate, more than the 0.5 s a holder that never left keeps
    assert w.grant("A", 2000, 1000, 1.8, fair_chunk=2000, rate_per_s=1000) == pytest.approx(900, abs=1)
    w.give_back("A", 0, 1.85)
    # away for more than a window: a newcomer again (half a window of its share) -- but a micro-batch worker
    # (back from gaps), so it takes the window's room beyond its bucket: the window is empty
    assert w.grant("A", 2000, 1000, 3.0, fair_chunk=2000, rate_per_s=1000) == pytest.approx(1000, abs=1)
    newcomer = GrantWindow(1.0, burst_s=0.5)
    assert newcomer.grant("B", 2000, 1000, 3.0, fair_chunk=2000, rate_per_s=1000) == pytest.approx(500, abs=1)


def test_a_holder_back_within_moments_catches_up_only_those_moments() -> None:
    # a batch job's worker ends one short task and starts the next within milliseconds: its bucket is what it
    # was, plus the time it was away -- not a full bucket for every task (1.3x the limit in a second, measured)
    w = GrantWindow(1.0, burst_s=0.5)
    assert w.grant("A", 2000, 1000, 0.0, fair_chunk=2000, rate_per_s=1000) == pytest.approx(500)
    assert w.grant("A", 2000, 1000, 0.3, fair_chunk=2000, rate_per_s=1000) == pytest.approx(300)
    w.give_back("A", 0, 0.3)                         # its task ended
    # back 20 ms later: 20 ms of its fair rate, though the window has 200 left and a returning bucket holds 1,000
    assert w.grant("A", 2000, 1000, 0.32, fair_chunk=2000, rate_per_s=1000) == pytest.approx(20, abs=1)


def test_a_bursting_holders_grants_count_until_its_next_report_even_while_it_spends_as_it_goes() -> None:
    w = SpentWindow(1.0)
    w.report("A", 0, [(0.1, 10)], now_s=0.1)        # it spends as it goes
    w.granted("A", 30)                              # a steady holder's chunk: its spends will say when it went
    w.granted("A", 200, bursts=True)                # a micro-batch worker's catch-up: spent at once, told later
    assert w.counted(0.1) == 210
    w.report("A", 50, [(0.15, 180)], now_s=0.2)     # told: spent, or in its stock
    assert w.counted(0.2) == 190
    w.granted("A", 100, bursts=True)
    assert w.counted(1.19) == 100 and w.counted(1.21) == 0   # silent for a window: gone, and its grants with it


def test_what_repays_a_told_debt_is_counted_once() -> None:
    # a send of 25 on 6.25 tokens: the whole 25 is told as spent, and the 18.75 that repay it enable no send. Counted
    # as a bursting holder's fresh grant as well, sixteen micro-batch workers in debt at a micro-batch's end held the
    # bound about 150 over what they had sent, and their last sends waited on it (simulated, keepers 40-80 ms apart:
    # 0.943 of the limit over twelve seeds, 0.965 counted once)
    w = SpentWindow(1.0)
    w.report("A", -18.75, [(0.1, 25)], now_s=0.1)
    w.granted("A", 15.0, bursts=True)                # all of it repays
    assert w.counted(0.1) == 25
    w.granted("A", 10.0, bursts=True)                # 3.75 repays, 6.25 is new: its next send comes of it
    assert w.counted(0.1) == pytest.approx(31.25)
    w.report("B", 0, [], now_s=0.1)                  # an idle holder in no debt counts all it is granted
    w.granted("B", 10.0)
    assert w.counted(0.1) == pytest.approx(41.25)
    w.report("C", -5, [(0.05, 20)], now_s=0.1)       # an idle one's debt (it reported no spend since)...
    w.report("C", -5, [], now_s=0.12)
    w.granted("C", 8.0)                              # ... repaid first too: 3 held
    assert w.held("C") == pytest.approx(3)


def test_two_micro_batch_workers_asking_moments_apart_share_the_bound_on_consumption() -> None:
    """A draws its catch-up a chunk at a time and spends each at once; B asks between two of A's asks. Counted
    only when A tells its spends, A's second chunk was not in the bound B's grant met: 1.15x the limit in the
    second after the first micro-batch's (late) spends (the cluster's 2-task stream read 1.075-1.125 in 5 of 16
    runs)."""
    w = GrantWindow(1.0)

    def ask(holder: str, t: float, spent: list | None = None, chunk: float = 200) -> float:
        w.report(holder, 0.0, spent or [], t)
        return w.grant(holder, 1000, 1000, t, fair_chunk=chunk, rate_per_s=1000)
    # micro-batch 1: granted at once, spent at 0.1 s (the tasks were slow to start sending), over at 0.2 s
    first = ask("A", 0.0, chunk=1000) + ask("B", 0.001, chunk=1000)
    for holder in ("A", "B"):
        w.report(holder, 0, [(0.1, 500 if holder == "A" else 250)], 0.2)
        w.give_back(holder, 0, 0.2)
    assert first == 750
    # micro-batch 2, after Spark's gap: the first grants slid out of the window, their spends not yet
    a1 = ask("A", 1.01)
    a2 = ask("A", 1.02, spent=[(1.011, a1)])
    b = ask("B", 1.021)
    assert first + a1 + a2 + b == pytest.approx(1000 * (1 + HELD_SLACK))   # spent in (0.1, 1.1]: the bound


def test_a_window_kept_before_bursting_grants_were_counted_still_counts_them() -> None:
    import pickle

    w = SpentWindow(1.0)
    w.report("A", 0, [(0.1, 10)], now_s=0.1)
    state = pickle.loads(pickle.dumps(w)).__dict__
    for name in ("_fresh", "_fresh_total"):   # as an earlier release kept it (a control plane's shared store)
        del state[name]
    revived = SpentWindow.__new__(SpentWindow)
    revived.__setstate__(state)
    revived.granted("A", 40, bursts=True)
    assert revived.counted(0.2) == 50


def test_the_bound_frees_a_pending_grant_when_enough_spends_slide_out() -> None:
    w = SpentWindow(1.0)
    w.report("A", 0, [(0.2, 300), (0.5, 400)], now_s=0.6)
    assert w.frees_s(1000, 0.6, pending=300) == 0.0           # 700 + 300 fit now
    assert w.frees_s(1000, 0.6, pending=500) == pytest.approx(0.6)    # 200 over: free when 0.2 s's 300 slide out
    assert w.frees_s(1000, 0.6, pending=800) == pytest.approx(0.9)    # 500 over: and 0.5 s's 400
    w.report("B", 250, [], now_s=0.6)                          # held through a gap: freed only by a report
    assert w.frees_s(1000, 0.6, pending=800) == 1.0


def test_a_grant_frees_when_both_bounds_let_it() -> None:
    """The grants slide out at 1.0 s; the spends they paid for, seen later, at 1.015 s: a grant waits for that."""
    w = GrantWindow(1.0, burst_s=1.0)
    w.report("A", 0.0, [], 0.0)
    granted = w.grant("A", 1000, 1000, 0.0, fair_chunk=1000, rate_per_s=1000)
    w.report("A", 0.0, [(0.015, granted)], 0.05)
    assert w.retry_s(1000, 0.99, pending=100) == pytest.approx(0.01)
    assert w.frees_s("A", 1000, 0.99, pending=100) == pytest.approx(0.025)


def test_a_micro_batch_workers_send_ahead_of_its_grant_counts_against_the_next_ask_at_once() -> None:
    """A send is charged whole: a pool granted 190 sends eight of 25 and runs 10 ahead of its grant, told only with
    its next report. Sixteen workers doing so at a micro-batch's start ran a window of sends 1.14-1.2x the limit. A
    micro-batch worker that says the send it waits to make (and what it holds) has that part counted with its fresh
    grants at once: the worker that asks next gets 10 less, and the window of consumption holds the bound."""

    def second_micro_batch(send: float) -> tuple[float, float]:
        w = GrantWindow(1.0)

        def ask(holder: str, t: float, chunk: float, send: float = 0.0) -> float:
            w.report(holder, 0.0, [], t)
            return w.grant(holder, 1000, 1000, t, fair_chunk=chunk, rate_per_s=1000, send=send, balance=0.0)
        assert ask("A", 0.0, 1000) + ask("B", 0.001, 1000) == 750
        for holder in ("A", "B"):
            w.report(holder, 0, [(0.1, 500 if holder == "A" else 250)], 0.2)
            w.give_back(holder, 0, 0.2)
        return ask("A", 1.01, 190, send=send), ask("B", 1.011, 1000)

    assert second_micro_batch(0.0) == (190, 110)       # spent in (0.1, 1.1]: 750 + 200 + 110, over the bound
    a, b = second_micro_batch(25.0)
    assert (a, b) == (190, 100)
    assert 750 + (a + 10) + b == pytest.approx(1000 * (1 + HELD_SLACK))   # A sends 200: its 190 and 10 ahead


def test_a_micro_batch_worker_with_nothing_more_in_hand_runs_nothing_ahead() -> None:
    """A task's last ask (a token, to tell its spends) after all its batch was charged: taken for a worker about to
    make a whole send, it counted a send of 25 ahead of its token until its give-back -- the next asker got 24 less,
    23 times in three runs of the 4-task stream. Told it has nothing more in hand (``coming`` 0), nothing runs
    ahead; one that says nothing (None) is still taken to make its send."""

    def next_asker_after_a_last_ask(coming: float | None) -> float:
        w = GrantWindow(1.0)
        for holder, t in (("A", 0.0), ("B", 0.001)):
            w.report(holder, 0.0, [], t)
            w.grant(holder, 1000, 1000, t, fair_chunk=1000, rate_per_s=1000)
        for holder in ("A", "B"):
            w.report(holder, 0, [(0.1, 500 if holder == "A" else 250)], 0.2)
            w.give_back(holder, 0, 0.2)
        w.report("A", 0.0, [], 1.01)
        w.grant("A", 190, 1000, 1.01, fair_chunk=190, rate_per_s=1000, send=25.0, balance=0.0, coming=190.0)
        w.report("A", 0.0, [(1.02, 190.0)], 1.03)   # its batch sent, all it was granted
        w.grant("A", 1.0, 1000, 1.04, fair_chunk=190, rate_per_s=1000, send=25.0, balance=0.0, coming=coming)
        w.report("B", 0.0, [], 1.05)
        return w.grant("B", 1000, 1000, 1.05, fair_chunk=1000, rate_per_s=1000)

    nothing_more, not_known = next_asker_after_a_last_ask(0.0), next_asker_after_a_last_ask(None)
    assert nothing_more - not_known == pytest.approx(24.0)   # a send of 25 ahead of its token, or nothing
    assert nothing_more == pytest.approx(1000 * (1 + HELD_SLACK) - 750 - 191)


def test_a_send_ahead_counts_only_for_a_reporting_holder_and_until_its_next_report() -> None:
    w = SpentWindow(1.0)
    w.ahead("stranger", 10)                        # (never reported: its grants alone bound it)
    assert w.counted(0.0) == 0
    w.report("A", 0, [], now_s=0.0)
    w.ahead("A", 10)
    w.ahead("A", 0)
    assert w.counted(0.01) == 10
    w.report("A", 0, [(0.02, 25)], now_s=0.03)     # told: the send, now a spend
    assert w.counted(0.03) == 25
