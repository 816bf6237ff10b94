"""The shared quota end to end: the real control plane and real participant processes.

Every test starts ``python -m controlplane`` on a free loopback port with a 0.25 s report interval and
participant processes (``participant_proc.py``) that pace sends to a demand and write, every 50 ms, how many
messages they got admitted and their local rate of the shared limit. Rates are measured over windows of 4
intervals (1 s) from those samples. Times below are offsets from the moment the processes start sending.
"""

from __future__ import annotations

import time

import pytest

from controlplane.grants import learning_s_for

from .conftest import INTERVAL_S, aggregate

pytestmark = pytest.mark.integration

LIMIT = 1000.0
WINDOW_S = 4 * INTERVAL_S
WINDOW_STEP_S = 0.5   # windows overlap: each 0.25-s bin lies in two of them


def _group(cp, name: str, namespace: str, msgs: float, strategy: str | None = None) -> None:
    body = {"publishRateInMsgs": msgs, **({"quotaStrategy": strategy} if strategy else {})}
    with cp.client() as admin:
        assert admin.put(f"/admin/v2/resourcegroups/{name}", json=body).status_code in (201, 204)
        assert admin.put(f"/admin/v2/namespaces/{namespace}/resourcegroup/{name}").status_code == 204


def _windows(t0: float, t1: float, step: float = WINDOW_STEP_S) -> list[tuple[float, float]]:
    out, t = [], t0
    while t + WINDOW_S <= t1 + 1e-9:
        out.append((t, t + WINDOW_S))
        t += step
    return out


def _trace(samples, t0: float, t1: float, step: float = 0.25) -> str:
    """Each participant's rate per ``step`` from t0, and the % of it waited in acquire (what a failed window
    assertion shows)."""
    bins = []
    t = t0
    while t + step <= t1 + 1e-9:
        bins.append((t, t + step))
        t += step
    return "\n".join(f"{a - t0:5.2f}s " + " ".join(f"{s.rate_between(a, b):6.0f} {100 * s.waited_between(a, b):3.0f}%"
                                                    for s in samples) for a, b in bins)


def _rates(samples, windows) -> list[float]:
    return [aggregate(samples, a, b) for a, b in windows]


def test_four_participants_with_unequal_demand_share_1000_msgs_per_s(cp, run_factory) -> None:
    _group(cp, "rg-four", "acme/four", LIMIT)
    run = run_factory(cp, lead_s=2.5)
    demands = [100, 200, 500, 800]   # sum 1600 > 1000; 100 and 200 are below the fair share (250)
    for i, d in enumerate(demands):
        run.add(f"acme/four/t{i}", [[0, d]], 6.0, watch=["resource_group", "rg-four"])
    samples = run.wait()
    assert all(s.head["ready"] for s in samples), "every participant got its first answer before sending"
    # from 2 s after the last one started sending, the aggregate is within 5 % of the limit in every 1 s window
    # until the end: held (no window is granted more) and used. Not from 1.5 s: each newcomer's first burst is half
    # a second of its share (sized by the holders that asked before it), so the first second's grants fill the
    # window early, and the pause that leaves echoes once a window later. Quiet, the window from 1.5 s read
    # 0.93-1.0 of the limit; under two CPU hogs 0.87-0.89, once in CI 0.88 -- its participants waiting in acquire
    # (the trace's % column: the limiter, not the host) -- and the windows from 2 s 0.95-1.03 either way
    joined = max(s.started for s in samples)
    start, end = joined + 2.0, min(s.rows[-1]["t"] for s in samples) - 0.1
    windows = _windows(start, end)
    assert len(windows) >= 5
    rates = _rates(samples, windows)
    detail = [(round(a - joined, 2), round(r), [round(s.rate_between(a, b)) for s in samples])
              for (a, b), r in zip(windows, rates, strict=True)]
    why = f"{detail}\n{_trace(samples, joined, end)}"
    # held and used on average; a single window within 10 %: on a loaded 2-core CI machine a participant starved
    # of CPU falls behind its fair rate for a moment (0.926 once) and then spends what its pool held (1.054 once)
    # -- the benchmark holds the tight goals
    assert 0.95 * LIMIT <= sum(rates) / len(rates) <= 1.03 * LIMIT, why
    assert all(r <= 1.1 * LIMIT for r in rates), why
    # used in every window the host kept up with: the 100/s participant is below its fair share and waits on the
    # limit only when the host starves the keeper or the control plane (an answer 0.1-0.2 s late, under two CPU
    # hogs), so a window in which it sent under 85 of its 100 is one in which the host stalled every participant at
    # once, not one the limiter left short (once in CI: [76, 200, 310, 302], 888 in all). One such stall is
    # allowed, and the windows overlap: a stall lies in two of them (under two hogs: 77 in two windows in a row)
    kept = [r for (a, b), r in zip(windows, rates, strict=True)
            if samples[0].rate_between(a, b) >= 0.85 * demands[0]]
    assert len(kept) >= len(rates) - round(WINDOW_S / WINDOW_STEP_S), f"the host stalled more than once: {why}"
    assert all(r >= 0.9 * LIMIT for r in kept), why
    # max-min fair: the small ones get what they want, the big ones split the rest (350 each). Within 10 %: a
    # participant below its fair share asks for what it spends, and gets a little less (200 reads 192-200 here
    # alone, 185 once in a loaded CI run; bench_quota's simulation shows the same bias: 189)
    late = (joined + 2.0, end)
    got = [s.rate_between(*late) for s in samples]
    assert got[0] == pytest.approx(100, rel=0.1) and got[1] == pytest.approx(200, rel=0.1), got
    assert got[2] == pytest.approx(350, rel=0.12) and got[3] == pytest.approx(350, rel=0.12), got


@pytest.mark.parametrize("strategy", ["fair", "proportional"])
def test_two_participants_wanting_70_percent_from_a_70_30_split(cp, run_factory, strategy: str) -> None:
    _group(cp, "rg-two", "acme/two", LIMIT, strategy)
    run = run_factory(cp)
    change = 2.5   # B wants 30 % until then (the split is 70/30), then 70 % like A
    run.add("acme/two/a", [[0, 700]], change + 3.5, watch=["resource_group", "rg-two"])
    run.add("acme/two/b", [[0, 300], [change, 700]], change + 3.5, watch=["resource_group", "rg-two"])
    a, b = run.wait()
    changed = b.started + change
    # the two seconds before the change: a host stall of 0.1 s (B waits for a grant that comes late, and does not
    # catch up what it missed) costs B 5 % of one second, 2.5 % of two (once in CI: 283 over the second before it,
    # 292 over the two)
    before = (changed - 2.0, changed)
    split = f"before: A {a.rate_between(*before):.0f} B {b.rate_between(*before):.0f}\n" + \
        _trace([a, b], changed - 2.0, changed)
    if strategy == "fair":   # each gets what it wants: B (below its fair share) within 5 %, A within 20 %. On a
        # loaded machine A's grant now and then comes late and A waits for it, while demand adding up to exactly the
        # limit leaves no spare to catch up: under two CPU hogs, A waited up to 117 ms of a 0.25-s bin (549/700 in
        # it), 587/700 over the second once in CI; quiet, 3 ms a bin and 700 flat
        assert b.rate_between(*before) == pytest.approx(300, rel=0.05), split
        assert a.rate_between(*before) >= 0.8 * 700, split
    else:   # proportional, Pulsar's, keeps each one's fraction of what was granted: a participant that fell short
        # once stays a little short, and demand adding up to exactly the limit leaves no spare to recover it
        assert b.rate_between(*before) / aggregate([a, b], *before) == pytest.approx(0.30, abs=0.08), split
    after = (changed + 3 * INTERVAL_S, min(a.rows[-1]["t"], b.rows[-1]["t"]) - 0.05)
    share_b = b.rate_between(*after) / aggregate([a, b], *after)
    assert aggregate([a, b], *after) == pytest.approx(LIMIT, rel=0.05)
    # (three processes on two cores: now and then one participant is starved of CPU for a moment, and the other
    # takes what it leaves -- the limit is work-conserving -- so a share reads up to ~0.06 off on a noisy machine)
    why = f"B got {share_b:.3f}\n" + _trace([a, b], changed - 1.0, after[1])
    if strategy == "fair":   # 50/50 within 3 intervals, and it stays there (0.47-0.52 measured on a quiet machine)
        assert share_b == pytest.approx(0.5, abs=0.08), why
    else:   # Pulsar's formula keeps whoever was throttled first throttled: anywhere from the old split up to
        # even, never past it (0.29-0.46 measured on a quiet machine)
        assert 0.25 <= share_b <= 0.55, why


@pytest.mark.parametrize("how", ["goodbye", "killed"])
def test_a_participant_that_exits_frees_its_share(cp, run_factory, how: str) -> None:
    _group(cp, "rg-exit", "acme/exit", 900)
    run = run_factory(cp)
    # (the leaver sends 3.5 s: the second before it leaves is measured past the start-up, when three processes
    # on two cores ask for their first grants at once)
    stays = [run.add(f"acme/exit/t{i}", [[0, 600]], 7.0, watch=["resource_group", "rg-exit"]) for i in range(2)]
    leaver = run.add("acme/exit/gone", [[0, 600]], 3.5, watch=["resource_group", "rg-exit"],
                     hard_exit=how == "killed")
    leaver_id = run.head(leaver)["participant_id"]
    samples = run.wait()
    left_at = samples[leaver].rows[-1]["t"]
    for i in stays:
        assert samples[i].rate_between(left_at - 1.0, left_at) == pytest.approx(300, rel=0.15), \
            "\n" + _trace(samples, left_at - 3.0, left_at)
    # what it held comes back within one window (1 s) after it stops asking: the others get 450 each
    after = (left_at + 1.5, min(samples[i].rows[-1]["t"] for i in stays) - 0.05)
    assert after[1] - after[0] >= 1.0
    for i in stays:
        assert samples[i].rate_between(*after) == pytest.approx(450, rel=0.08), i
    with cp.client() as c:
        departed = {d["participantId"]: d["departedBecause"] for d in c.get("/v1/state/participants").json()["departed"]}
    assert departed.get(leaver_id) == ("goodbye" if how == "goodbye" else "expired")


def test_limit_raised_and_lowered_live(cp, run_factory) -> None:
    _group(cp, "rg-live", "acme/live", LIMIT)
    run = run_factory(cp)
    for i in range(2):
        run.add(f"acme/live/t{i}", [[0, 700]], 9.5, watch=["resource_group", "rg-live"])
    changes = [(2.5, 1200.0), (5.5, 600.0)]
    done = []
    with cp.client() as admin:
        for offset, limit in changes:
            run.sleep_until(offset)
            r = admin.put("/admin/v2/resourcegroups/rg-live", json={"publishRateInMsgs": limit})
            assert r.status_code == 204
            done.append((time.time(), limit))
    samples = run.wait()
    for at, limit in done:   # held within one window (1 s) of the change, every window after it, and used
        enforced, until = at + 1.0, at + 1.0 + 2 * WINDOW_S
        why = f"limit {limit:g} set at 1.00s\n" + _trace(samples, at - 1.0, until)
        for a, b in _windows(enforced, until):
            assert aggregate(samples, a, b) <= 1.05 * limit, why
        # (used: 90 % over the two windows after it -- after a cut nothing is granted until the window's grants at
        # the old limit slide out, and the participants' paces, measured through that pause, catch up in the next
        # window: a single window read 0.885 once on a loaded machine, 0.93-0.97 on an idle one)
        assert aggregate(samples, enforced, until) >= 0.9 * limit, why
    lowered = done[1][0]
    for a, b in _windows(lowered + 1.0, min(s.rows[-1]["t"] for s in samples) - 0.05):
        assert aggregate(samples, a, b) <= 1.05 * 600


def test_control_plane_killed_then_restarted(cp, run_factory) -> None:
    _group(cp, "rg-down", "acme/down", LIMIT)
    run = run_factory(cp)
    run.env["THROTTLESCOPE_BACKOFF_MAX_S"] = "1.0"   # retry at least every second while it is down
    for i in range(2):
        run.add(f"acme/down/t{i}", [[0, 700]], 13.5, watch=["resource_group", "rg-down"])
    ids = {run.head(i)["participant_id"] for i in range(2)}
    run.sleep_until(2.0)
    killed_at = time.time()
    cp.kill()                         # SIGKILL: no goodbye, no answer, connections refused
    run.sleep_until(3.5)
    restarting_at = time.time()       # the outage ends here: a participant may get in before /healthz answers us
    cp.start()                        # same port, same data directory
    restarted_at = time.time()
    rejoined = None
    with cp.client() as c:
        assert c.get("/v1/state/shared").json()["learning"], "the restarted control plane does not re-learn"
        while time.time() < restarted_at + 4.0:
            live = {p["participantId"] for p in c.get("/v1/state/participants").json()["participants"]}
            if ids <= live:
                rejoined = time.time()
                break
            time.sleep(0.05)
    assert rejoined is not None, "participants did not rejoin the restarted control plane"
    assert rejoined - restarted_at <= 1.0 + 3 * INTERVAL_S   # the backoff cap, plus a round or two
    joins = rejoined + 1.5
    run.add("acme/down/new", [[0, 700]], 6.0, watch=["resource_group", "rg-down"], start_at=joins)
    samples = run.wait()
    old = samples[:2]
    # fail-static: the pools are spent, then each runs at the safe rate the control plane last answered (the
    # static split, 500 each): the limit holds and nobody stalls
    for s in old:
        outage = [r for r in s.rows if killed_at + 1.0 <= r["t"] <= restarting_at]
        assert outage and all(r["rate"] == pytest.approx(500, rel=0.02) for r in outage), outage[:3]
        assert not any(r["connected"] for r in outage)
        assert s.rate_between(killed_at + 0.5, restarting_at) >= 0.7 * 500   # no stall
    assert aggregate(old, killed_at + 0.5, restarting_at) <= 1.05 * LIMIT
    # no burst when they come back: the restarted control plane re-learns (each gets no more than its safe rate
    # until everyone has been heard from)
    for a, b in _windows(restarted_at, joins):
        assert aggregate(old, a, b) <= 1.05 * LIMIT, _trace(old, restarted_at - 1.5, joins)
    # a newcomer gets its share once the control plane has re-learned, and the limit is used again
    end = min(s.rows[-1]["t"] for s in samples) - 0.1
    settled = max(joins, restarted_at + learning_s_for(INTERVAL_S)) + 2 * INTERVAL_S
    assert end >= settled + 2 * WINDOW_S, "too little of the run left after re-learning (a slow restart)"
    assert samples[2].rate_between(settled, end) >= 0.2 * LIMIT
    # held in every window, and used over the whole span (the mean over a span that is not a whole number of
    # windows bounds no window, nor is bounded by them: over 1.5 s, after a slow restart in CI, it read 1.105x)
    why = _trace(samples, settled - 0.5, end)
    for a, b in _windows(settled, end):
        assert aggregate(samples, a, b) <= 1.05 * LIMIT, why
    assert aggregate(samples, settled, end) >= 0.9 * LIMIT, why
    for i in range(2):   # one warning for the whole outage, not one per attempt
        assert run.stderr(i).count("unreachable") == 1, run.stderr(i)
