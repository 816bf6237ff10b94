"""Two applications of one limit, simulated: a greedy micro-batch stream beside a trickle, through the real
participants and grant book on a manual clock, and the same demand through an exact moving window (what a central
limiter on Redis does, at one round trip per acquire).

The benchmark's workload (``benchmarks.shared.workloads``: two Spark drivers on one core each) reads ours 0.93 of
the limit against Redis's 0.96-0.97; this is its shape without Spark, so that where the rest goes can be counted.
Each application runs micro-batches of 1,000 rows in two tasks of 500, one after the other (its one core), with
Spark's gap between micro-batches (``GAP_S``, drawn per micro-batch) and 20 ms between its two tasks; a task is a
producer of its participant, gone (its tokens given back) when the task ends. The greedy job sends 25 rows at a
time as fast as its pool lets it; the trickle sends four of 25 once a second (an Arrow batch of 100 rows, sliced),
a tenth of the limit. Simulated so (0.1-0.3 s gaps, 12 seeds): ours 0.929 of the limit, the exact window 0.996;
of ours' 7 points, 2.7 are room the window frees while the greedy job is between micro-batches, 2.5 room while it
waits on its pool, and the rest tokens held unspent and given back.
"""

from __future__ import annotations

import gc
import random
from collections import deque
from collections.abc import Callable

import pytest

from limiter import ManualClock
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

    def __init__(self, pace: int, rnd: random.Random):
        self.pace, self.rnd = pace, rnd
        self.running, self.left, self.tasks, self.wake_s, self.started_s, self.sent = False, 0, 0, 0.0, 0.0, 0

    def step(self, now_s: float, start: Callable[[], None], end: Callable[[], None],
             send: Callable[[], bool]) -> int:
        """Runs the app at ``now_s``; returns the rows it sent."""
        if not self.running and now_s >= self.wake_s:
            start()
            self.running, self.left, self.started_s, self.sent = True, TASK_ROWS, now_s, 0
        if not self.running:
            return 0
        sent = 0
        while self.left > 0 and (self.pace == 0 or now_s >= self.started_s + self.sent // (self.pace * SEND)):
            if not send():
                break
            self.left, self.sent, sent = self.left - SEND, self.sent + SEND, sent + SEND
            if self.pace:
                break   # (one send a step: the trickle's four sends of a second come 10 ms apart)
        if self.left <= 0:
            end()
            self.running, self.tasks = False, self.tasks + 1
            self.wake_s = now_s + (self.rnd.uniform(*GAP_S) if self.tasks % 2 == 0 else 0.02)
        return sent


def _simulate(seed: int, span_s: float, ours: bool) -> tuple[float, float, list[tuple[float, int]]]:
    """(mean admitted / limit, worst 1-s window / limit, admissions) after WARM_UP_S of ``span_s``."""
    rnd = random.Random(seed)
    apps = [_App(0, rnd), _App(4, rnd)]   # the greedy job, the trickle (4 sends of 25 a second)
    admitted: list[tuple[float, int]] = []
    if ours:
        clock = ManualClock()
        _, parts = world(clock)
        producers: list = [None, None]
        now, advance = clock.now_s, clock.advance

        def start(i: int) -> None:
            producers[i] = parts[i].producer(TOPIC)

        def end(i: int) -> None:
            producers[i] = None
            gc.collect()   # the task's producer is gone: its pool gives back

        def send(i: int) -> bool:
            return not producers[i].paused and producers[i].try_acquire(SEND)

        def beat() -> None:   # each participant's keeper
            for p in parts:
                p.grant_keeper.run_once()
    else:
        window: deque[tuple[int, int]] = deque()   # (step, rows): whole steps, so no float edge at a second
        steps = [0]
        per_window = round(1.0 / STEP_S)

        def now() -> float:
            return steps[0] * STEP_S

        def advance(seconds: float) -> None:
            steps[0] += round(seconds / STEP_S)

        def start(i: int) -> None:
            pass

        end = start

        def send(i: int) -> bool:   # the moving window: what was admitted in the last second, this step's included
            while window and window[0][0] <= steps[0] - per_window:
                window.popleft()
            if sum(n for _, n in window) + SEND > LIMIT:
                return False
            window.append((steps[0], SEND))
            return True

        def beat() -> None:
            pass
    t0 = now()
    while now() < t0 + span_s:
        beat()
        at = now()
        for i, app in enumerate(apps):
            sent = app.step(at, lambda i=i: start(i), lambda i=i: end(i), lambda i=i: send(i))
            if sent and at >= t0 + WARM_UP_S:
                admitted.append((at, sent))
        advance(STEP_S)
    seconds = span_s - WARM_UP_S
    return sum(n for _, n in admitted) / (LIMIT * seconds), worst_window(admitted) / LIMIT, admitted


def test_two_applications_share_the_limit_a_stream_beside_a_trickle() -> None:
    """Ours within its goal's bound on every window, and within a few points of the exact window's use of the
    limit (0.93 against 0.996 here, the benchmark's 0.93 against Redis's 0.96-0.97): what is left is Spark's gaps
    and the fair split's pacing, counted in the module doc."""
    ours = [_simulate(seed, 30.0, ours=True) for seed in range(2)]
    exact = [_simulate(seed, 30.0, ours=False) for seed in range(2)]
    ours_mean = sum(m for m, _, _ in ours) / len(ours)
    exact_mean = sum(m for m, _, _ in exact) / len(exact)
    assert exact_mean >= 0.98, exact_mean                     # the same demand can use the limit
    assert ours_mean >= 0.90, (ours_mean, exact_mean)         # 0.92-0.93
    assert max(w for _, w, _ in ours) <= (LIMIT * 1.05 + SEND) / LIMIT
