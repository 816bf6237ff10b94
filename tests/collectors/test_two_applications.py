"""Two applications of one limit, simulated: a greedy micro-batch stream beside a trickle, through the real
participants and grant book on a manual clock, and the same demand through an exact moving window (what a central
limiter on Redis does, at one round trip per acquire).

The benchmark's workload (``benchmarks.shared.workloads``: two Spark drivers on one core each) reads ours 0.955 of
the limit against Redis's 0.974; this is its shape without Spark, so that where the rest goes can be counted.
Each application runs micro-batches of 1,000 rows in two tasks of 500, one after the other (its one core), with
Spark's gap between micro-batches (``GAP_S``, drawn per micro-batch) and 20 ms between its two tasks; a task is a
producer of its participant, gone (its tokens given back) when the task ends. The greedy job sends 25 rows at a
time as fast as its pool lets it; the trickle sends four of 25 once a second (an Arrow batch of 100 rows, sliced),
a tenth of the limit. Simulated so (0.1-0.3 s gaps, 12 seeds): ours 0.929 of the limit, the exact window 0.996;
of ours' 7 points, 2.7 were room the window freed while the greedy job was between micro-batches, 2.5 room while
it waited on its pool, and the rest tokens held unspent and given back (the trickle held 25-29 on average, the
rest of its chunk, for half a second after each burst). Since a micro-batch worker takes the window's room beyond
its bucket (``limiter.grants``) and a pool sending in bursts gives back soon after each (``collectors.grants``):
0.948 (each alone: 0.941 and 0.937); the trickle holds 8 on average. Those figures left a producer waiting on a
pool that was topped up until the next step (see ``_Ours.beat``); released within the step, as the real scheduler
does: 0.941 with the code before the two changes, 0.956 with them, as the benchmark's 0.955. What is left is at
the greedy job's gaps: its catch-up after a gap (351 rows in the first tenth of a second; through the exact window
209) slides out a second later, and a micro-batch's sends take about that long, so it frees more room than the job
has rows left just as its next gap starts: the admissions of the last second read 894 then (the exact window's
greedy job sends its last rows as room frees: 1,000), and 831 and 794 in the gap's first two tenths (958, 935).
Room that slides out in a gap goes to no one unless another holder has a backlog then: since the trickle, small
beside the hungry greedy job, waits up to 0.45 of the window for its grants (``limiter.grants``: its batch goes
in the greedy job's next gap, or after the wait), 0.974 over the two seeds below (0.978 over 12), its sends waiting
247 ms on average against 183 ms served at once.

But the exact window's figure is its order's (2026-12-01): the loop steps the greedy job first, so it takes all the
room that comes free, and the trickle's bursts wait 0.6-1 s for theirs (ours: 0.2-0.3 s) -- a backlog that fills the
greedy job's gaps, where ours' room goes unused. With the two served in an order drawn at each step (as a central
limiter's callers race for freed room), the exact window reads 0.926-0.956 over four seeds, the trickle's bursts
waiting 254-375 ms, and ours 0.941-0.967 and 205-297 ms (0.938-0.958 with grants dated part by part, since): at one
send size ours uses at least as much. What moves the exact window is the trickle's send: its 100 rows as one send of
100 (the benchmark's Redis charges each Arrow batch whole), 0.970 with its bursts waiting 157 ms on average (ours
so: 0.955, 141 ms). On the benchmark (2026-12-01, three runs each): Redis charged in ours' slices of 25 rows 0.933
of the limit, the trickle's batches waiting 203 ms; ours 0.939 and 181 ms; Redis charging whole batches 0.944 and
140 ms.
"""

from __future__ import annotations

import random
import weakref
from collections import deque

import pytest

from limiter import ManualClock
from protocol import PolicySet
from tests.collectors.test_grants import LIMIT as ONE_TOPIC_LIMIT
from tests.collectors.test_grants import TOPIC, world, worst_window

pytestmark = pytest.mark.unit

LIMIT = 1000.0
SEND = 25
TASK_ROWS = 500
GAP_S = (0.1, 0.3)   # Spark's gap between two micro-batches of one application
STEP_S = 0.01
WARM_UP_S = 3.0


class _App:
    """One application's tasks: ``pace`` sends of SEND a second (0: as fast as it may), two tasks a micro-batch."""

    def __init__(self, pace: int, rnd: random.Random, gaps_s: tuple[float, float] = GAP_S):
        self.pace, self.rnd, self.gaps_s = pace, rnd, gaps_s
        self.running, self.left, self.tasks, self.wake_s, self.started_s, self.sent = False, 0, 0, 0.0, 0.0, 0

    def step(self, now_s: float, limiter: _Ours | _ExactWindow, me: int) -> int:
        """Runs the app (``me`` to ``limiter``) at ``now_s``; returns the rows it sent."""
        if not self.running and now_s >= self.wake_s:
            limiter.start(me)
            self.running, self.left, self.started_s, self.sent = True, TASK_ROWS, now_s, 0
        if not self.running:
            return 0
        sent = 0
        while self.left > 0 and (self.pace == 0 or now_s >= self.started_s + self.sent // (self.pace * SEND)):
            if not limiter.send(me):
                break
            self.left, self.sent, sent = self.left - SEND, self.sent + SEND, sent + SEND
            if self.pace:
                break   # (one send a step: the trickle's four sends of a second come 10 ms apart)
        if self.left <= 0:
            limiter.end(me)
            self.running, self.tasks = False, self.tasks + 1
            self.wake_s = now_s + (self.rnd.uniform(*self.gaps_s) if self.tasks % 2 == 0 else 0.02)
        return sent


class _Ours:
    """The two applications' participants of one limit on a manual clock: a task is a producer of its app's."""

    def __init__(self, limits: PolicySet = ONE_TOPIC_LIMIT, order: random.Random | None = None) -> None:
        self.clock = ManualClock()
        _, self.parts = world(self.clock, limits=limits)
        self.producers: list = [None, None]
        self._order = order or random.Random(len(self.parts))   # (the keepers' turns)

    def now(self) -> float:
        return self.clock.now_s()

    def beat(self) -> None:
        # each participant's keeper, in an order drawn at each step as two processes' keepers race, then the tasks.
        # In a fixed order the greedy job's keeper asked first at every step and took whatever came free in it:
        # the trickle turned greedy got 425-479 a second of the 1,000 (six seeds; 468-546 in drawn turns)
        for p in self._order.sample(self.parts, len(self.parts)):
            p.grant_keeper.run_once()
        # a pool topped up releases its waiting producer through a timer due now: the real scheduler's thread runs
        # it at once, the manual clock only when time moves -- run it here, before the tasks, as it would be (left
        # to the next 10-ms step, every deposit cost the greedy job a step: 0.948 of the limit over 12 seeds, 0.956
        # with this, the benchmark's 0.955)
        self.clock.advance(0.0)

    def start(self, app: int) -> None:
        self.producers[app] = self.parts[app].producer(TOPIC)

    def end(self, app: int) -> None:
        gone = weakref.ref(self.producers[app])
        # the task's producer dies with this reference, as in a Python worker, and its pool gives back (a cyclic
        # collection here, as before, took 0.05-0.2 s each: most of this module's and the next's minutes in CI)
        self.producers[app] = None
        assert gone() is None, "the task's producer outlived its last reference"

    def send(self, app: int) -> bool:
        producer = self.producers[app]
        return not producer.paused and producer.try_acquire(SEND)

    def advance(self) -> None:
        self.clock.advance(STEP_S)


class _ExactWindow:
    """What a central exact limiter does: at most the limit in any second, checked at each send."""

    PER_WINDOW = round(1.0 / STEP_S)

    def __init__(self) -> None:
        self.window: deque[tuple[int, int]] = deque()   # (step, rows): whole steps, so no float edge at a second
        self.step = 0

    def now(self) -> float:
        return self.step * STEP_S

    def beat(self) -> None:
        pass

    def start(self, app: int) -> None:
        pass

    end = start

    def send(self, app: int) -> bool:   # what was admitted in the last second, this step's included
        while self.window and self.window[0][0] <= self.step - self.PER_WINDOW:
            self.window.popleft()
        if sum(n for _, n in self.window) + SEND > LIMIT:
            return False
        self.window.append((self.step, SEND))
        return True

    def advance(self) -> None:
        self.step += 1


def _simulate(seed: int, span_s: float, ours: bool, paces: tuple[int, ...] = (0, 4), fair_order: bool = False,
              gaps_s: tuple[float, float] = GAP_S) -> tuple[float, float, float]:
    """(mean admitted / limit, worst 1-s window / limit, the first app's part of what was admitted) after
    WARM_UP_S of ``span_s``; ``paces``: each app's (0: a greedy job; 4: the trickle, 4 sends of 25 a second).
    The apps step in their order at every step, the greedy job first; ``fair_order``: in an order drawn anew at
    each step (for an exact window, who is first takes the room that came free: see the module doc); ``gaps_s``:
    the range Spark's gap between two micro-batches is drawn from."""
    rnd, order = random.Random(seed), random.Random(seed + 1000)
    apps = [_App(pace, rnd, gaps_s) for pace in paces]
    limiter = _Ours() if ours else _ExactWindow()
    admitted: list[tuple[float, int]] = []
    first = 0
    t0 = limiter.now()
    while limiter.now() < t0 + span_s:
        limiter.beat()
        at = limiter.now()
        turns = list(range(len(apps)))
        if fair_order:
            order.shuffle(turns)
        for i in turns:
            sent = apps[i].step(at, limiter, i)
            if sent and at >= t0 + WARM_UP_S:
                admitted.append((at, sent))
                first += sent if i == 0 else 0
        limiter.advance()
    seconds = span_s - WARM_UP_S
    total = sum(n for _, n in admitted)
    return total / (LIMIT * seconds), worst_window(admitted) / LIMIT, first / max(1, total)


def test_two_applications_share_the_limit_a_stream_beside_a_trickle() -> None:
    """Ours within its goal's bound on every window, and within a few points of the exact window's use of the
    limit (0.974 against 0.994 here; 0.954 before the trickle waited beside the greedy job): what is left is in
    Spark's gaps, counted in the module doc."""
    ours = [_simulate(seed, 30.0, ours=True) for seed in range(2)]
    exact = [_simulate(seed, 30.0, ours=False) for seed in range(2)]
    ours_mean = sum(m for m, _, _ in ours) / len(ours)
    exact_mean = sum(m for m, _, _ in exact) / len(exact)
    assert exact_mean >= 0.98, exact_mean                     # the same demand can use the limit
    # (deterministic: 0.974 now; 0.954 before the trickle waited beside the greedy job, 0.937 before a micro-batch
    # worker took the window's room beyond its bucket and a pool sending in bursts gave back soon after each)
    assert ours_mean >= 0.967, (ours_mean, exact_mean)
    assert max(w for _, w, _ in ours) <= (LIMIT * 1.05 + SEND) / LIMIT


def test_two_greedy_micro_batch_applications_share_the_limit_fairly() -> None:
    """Two greedy jobs of the same shape, each a micro-batch worker that takes the window's room beyond its bucket
    after its gaps: both use the whole limit, and neither takes much more than the other. The room leaves out what
    the other was just answered short of: without that, 66/34 and 75/25; with it 54/46 and 55/45, as with the
    buckets alone (this loop lets the first job ask first at every step)."""
    runs = [_simulate(seed, 20.0, ours=True, paces=(0, 0)) for seed in range(2)]
    assert min(m for m, _, _ in runs) >= 0.98, runs
    assert all(0.42 <= first <= 0.58 for _, _, first in runs), runs
    assert max(w for _, w, _ in runs) <= (LIMIT * 1.05 + SEND) / LIMIT


def test_ours_uses_the_limit_as_fully_as_an_exact_window_serving_the_two_in_a_fair_order() -> None:
    """The exact window's 0.99 above is its greedy job's: stepping first at every step, it takes all the room that
    comes free, and the trickle's bursts wait 0.6-1 s for theirs -- a backlog that fills the greedy job's gaps.
    Served in an order drawn at each step, the exact window reads 0.926-0.956 of the limit over four seeds (the
    trickle's bursts waiting 254-375 ms on average) against ours' 0.974-0.986 (0.938-0.958 before the trickle
    waited beside the greedy job): at one send size ours uses more, and the greedy-first order's 0.99 is paid for
    by the small sender's wait."""
    ours = [_simulate(seed, 30.0, ours=True, fair_order=True)[0] for seed in range(4)]
    exact = [_simulate(seed, 30.0, ours=False, fair_order=True)[0] for seed in range(4)]
    assert sum(ours) >= sum(exact) + 0.1, (ours, exact)   # (3.908 against 3.770; 3.806 before)


def test_longer_spark_gaps_cost_a_stream_alone_nothing_and_beside_the_trickle_what_they_cost_an_exact_window() -> None:
    """Spark's gap between two micro-batches is the host's: the benchmark's drivers took 0.29-0.31 s on average
    with no limiter on a host where they had taken about 0.2 s, and 0.28-0.46 s with a limiter. Alone, a stream of
    micro-batches of a window's worth keeps the limit full through gaps of 0.4-0.55 s: its next micro-batch would
    wait for its room in any case. Beside the trickle no limiter that holds every window can: a micro-batch of a
    window's worth whose sends take S < 1 s from its first, at T, to its last, at E, fills every window that ends
    between E and T + 1, so no other send may fall in (E - 1, T + 1); the trickle's fit only between T + 1 and the
    next micro-batch's last send less a second, so a cycle (S and Spark's gap B) in which the trickle sends lasts at
    least 2 - S, i.e. 1 + B / 2, and the limit's use is at most 1 / (1 + B / 2) and the trickle's tenth: 0.908 at
    these gaps (at 0.1-0.3 s the bound is above the limit). The exact window reads 0.871 here, ours 0.853 (0.838,
    0.881, 0.841): the benchmark's 0.87 for both kinds on the slower host."""
    gaps_s = (0.4, 0.55)
    alone = [_simulate(seed, 20.0, ours=True, paces=(0,), gaps_s=gaps_s)[0] for seed in range(3)]
    assert min(alone) >= 0.99, alone
    ours = [_simulate(seed, 20.0, ours=True, gaps_s=gaps_s)[0] for seed in range(3)]
    exact = [_simulate(seed, 20.0, ours=False, gaps_s=gaps_s)[0] for seed in range(3)]
    mean_gap_s = sum(gaps_s) / 2
    bound = 1 / (1 + mean_gap_s / 2) + 0.1   # (and the trickle's tenth)
    assert max(exact) <= bound and max(ours) <= bound, (ours, exact, bound)
    assert sum(ours) / 3 >= sum(exact) / 3 - 0.03, (ours, exact)


def test_no_second_holds_more_than_the_limit_its_slack_and_one_send_where_grants_are_dated_back() -> None:
    """Seed 2 is the one in which an ask's 125 tokens, dated 30 ms back to when their room came free, had that room
    taken again right on time a window later: 1,100 sends in one second of a 1,000 limit before the grants made in a
    window were bounded as well as the grants dated in it (``limiter.grants``)."""
    for seed in (2, 4):
        mean, worst, _ = _simulate(seed, 30.0, ours=True)
        assert worst <= (LIMIT * 1.05 + SEND) / LIMIT, (seed, mean, worst)


def test_a_trickle_that_turns_greedy_gets_its_share_at_once() -> None:
    """The trickle sends as fast as it may from 12 s on: it gets about half of the limit in the 8 s after, as a
    greedy job served at once does (450-462 rows a second). Small by its grants alone, the wait beside the greedy
    job kept it small, held at each micro-batch for seconds (366 in one seed); it says it wants the whole limit at
    every ask since, and is small no more two windows later."""
    switch_s, end_s = 12.0, 20.0
    for seed in range(3):
        rnd, order = random.Random(seed), random.Random(seed + 1000)
        apps = [_App(0, rnd), _App(4, rnd)]
        limiter = _Ours()
        grown = 0
        while limiter.now() < end_s:
            limiter.beat()
            at = limiter.now()
            if at >= switch_s:
                apps[1].pace = 0
            turns = [0, 1]
            order.shuffle(turns)
            for i in turns:
                sent = apps[i].step(at, limiter, i)
                grown += sent if i == 1 and at >= switch_s + 1.0 else 0
            limiter.advance()
        assert grown / (end_s - switch_s - 1.0) >= 0.42 * LIMIT, (seed, grown)
