"""A stream of micro-batches of half the limit, simulated: two Spark workers (one participant each), each micro-batch
four tasks of 125 rows that the workers take in turn (a task's start costs ``TASK_START_S``), Spark's gap between
micro-batches, through the real participants and grant book on a manual clock, and through an exact moving window.

The benchmark's "micro-batches of half the limit" (``benchmarks.shared.workloads``) reads ours 0.986-0.99 of the
limit against Redis's 0.998: two micro-batches a window, where the window's catch-up and echo were built for one.
Simulated so (4 seeds, 30 s): ours 0.983, the exact window 1.0. A worker whose task's last send overdrew its pool
by part of a send was granted that debt with its next task, a micro-batch later: the window counted those tokens
late, full while the sends it had seen left room for one more, and the next micro-batch's last task waited for it
to slide (0.979 before its give-back was answered with the debt). Those figures left a producer waiting on a pool
that was topped up until the next 10-ms step (``_Ours.beat``); released within the step, as the real scheduler
does: 0.999 over the same seeds.
"""

from __future__ import annotations

import random

import pytest

from tests.collectors.helpers import policies
from tests.collectors.test_grants import TOPIC, worst_window
from tests.collectors.test_two_applications import LIMIT, SEND, WARM_UP_S, _ExactWindow, _Ours

pytestmark = pytest.mark.unit

TASKS, TASK_ROWS = 4, 125     # a micro-batch of half the limit
TASK_START_S = 0.05           # a task's start on its worker before its first send
GAP_S = (0.1, 0.3)            # Spark's gap between two micro-batches


def _simulate(seed: int, span_s: float, ours: bool, *, limit_per_s: int = int(LIMIT), tasks_a_batch: int = TASKS,
              task_rows: int = TASK_ROWS, order: random.Random | None = None) -> tuple[float, float]:
    """(mean admitted / limit, worst 1-s window / limit) after WARM_UP_S of ``span_s``; ``limit_per_s`` other
    than the exact window's LIMIT: ours alone; ``order``: the keepers' turns (``_Ours``)."""
    rnd = random.Random(seed)
    if not ours and limit_per_s != LIMIT:
        raise ValueError(f"the exact window holds {LIMIT:g} a second, not {limit_per_s}")
    limits = policies(topics={TOPIC: {"publishRate": {"publishThrottlingRateInMsg": limit_per_s}}})
    limiter = _Ours(limits, order) if ours else _ExactWindow()
    t0 = limiter.now()
    admitted: list[tuple[float, int]] = []
    queued, next_batch_s = 0, t0
    tasks: list[list[float] | None] = [None, None]   # per worker: [rows left, first send at] while it runs one
    while limiter.now() < t0 + span_s:
        limiter.beat()
        now = limiter.now()
        if not queued and tasks == [None, None] and now >= next_batch_s:
            queued, next_batch_s = tasks_a_batch, now
        for w in range(2):
            if tasks[w] is None and queued:
                queued -= 1
                tasks[w] = [task_rows, now + TASK_START_S]
                limiter.start(w)
            task = tasks[w]
            if task is None or now < task[1]:
                continue
            while task[0] > 0 and limiter.send(w):
                task[0] -= SEND
                if now >= t0 + WARM_UP_S:
                    admitted.append((now, SEND))
            if task[0] <= 0:
                limiter.end(w)
                tasks[w] = None
                if not queued and tasks == [None, None]:
                    next_batch_s = now + rnd.uniform(*GAP_S)
        limiter.advance()
    return sum(n for _, n in admitted) / (limit_per_s * (span_s - WARM_UP_S)), worst_window(admitted) / limit_per_s


def test_a_stream_of_micro_batches_of_half_the_limit_uses_it() -> None:
    ours = [_simulate(seed, 20.0, ours=True) for seed in range(2)]
    exact = [_simulate(seed, 20.0, ours=False) for seed in range(2)]
    assert min(m for m, _ in exact) >= 0.99                  # the same demand can use the limit
    # (deterministic: 1.0 now, with a waiting producer released within the step its pool is topped up -- over
    # eight 30-s seeds 0.999, 0.995 without the room a micro-batch worker takes beyond its bucket. Released at the
    # next step, as before: 0.990; 0.996 before that room rule -- over eight seeds 0.982 with it and 0.983
    # without --, 0.982 before a give-back in debt was answered with the debt)
    assert sum(m for m, _ in ours) / len(ours) >= 0.985, ours
    assert max(w for _, w in ours) <= (LIMIT * 1.05 + SEND) / LIMIT
