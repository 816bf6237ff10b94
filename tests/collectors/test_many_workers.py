"""Sixteen Spark workers on one limit, simulated: one application's micro-batches of 1,000 rows, a task of 62-63
rows on each worker (sends of 25, 25 and the rest), every task of a micro-batch starting within a tenth of a second,
Spark's gap after the last one ends -- through the real participants and grant book on a manual clock.

The benchmark's ``stream, 1 topic, 16 workers`` read worst windows of 1.16-1.2x the limit (its mean 0.995): sixteen
askers' fair chunks are 15.6 tokens, each lets its holder send 25 (a send is charged whole and overdraws the rest),
and at each micro-batch's start all sixteen ran a part of a send ahead of the window at once, the spends' bound
told of them only with their next asks. Simulated so: 1.0 of the limit, worst windows 1.137-1.149 (three seeds of
25 s). Each micro-batch worker now says the send its producer waits to make, and the part of it that will run ahead
of its grant counts against the next asker at once (``limiter.spent``: ``SpentWindow.ahead``): 1.05-1.063, the
limit as used. On the benchmark the stream read 1.088 and 1.1 again on a busy host, its two cores 85-95 % busy: a
worker's keeper there asks tens of milliseconds apart, and each task's first ask, made before its first send was
refused, said no send. Simulated with each keeper's rounds 20-40, 30-60 and 40-80 ms apart (12 seeds each): worst
windows over 1.075 in 2, 1 and 1 seeds (1.076-1.088); with a pool saying the send its last waiting producer was
queued with, none (at most 1.075, 1.074, 1.062), the mean 0.9997, 0.980 and 0.940 (0.9996, 0.986, 0.944 before).
Traced on the benchmark: at each micro-batch's end the workers in debt (a last send of 25 made on a few tokens) had
what repaid it counted twice, as told spends and as fresh grants, and the last sends waited on the bound that held
(counted about 150 over what had been sent). Counted once, and a pool with none waiting saying the largest of its
last few waiting sends (the last alone is the remainder that ended the task before, 12 where the next sends 25):
twelve seeds each, 0.9996, 0.981 and 0.943 of the limit at the three lags before, 1.0, 0.985 and 0.965 after, every
worst window within 1.075.
"""

from __future__ import annotations

import random

import pytest

from limiter import ManualClock
from tests.collectors.test_grants import TOPIC, world, worst_window
from tests.collectors.test_two_applications import LIMIT, STEP_S, WARM_UP_S

pytestmark = pytest.mark.unit

WORKERS, ROWS, SEND = 16, 1000, 25
GAP_S = (0.25, 0.45)     # Spark's gap between two micro-batches
START_S = (0.0, 0.1)     # when each task of a micro-batch starts sending


def _simulate(seed: int, span_s: float, keeper_apart_s: tuple[float, float] = (0.0, 0.0),
              gap_s: tuple[float, float] = GAP_S, busy_keeper_apart_s: tuple[float, float] | None = None,
              says_coming: bool = False) -> tuple[float, float]:
    """(mean admitted / limit, worst 1-s window / limit) after WARM_UP_S of ``span_s``; each participant's keeper
    runs a round ``keeper_apart_s`` (a range) after its last (0: at every step) -- ``busy_keeper_apart_s`` while
    any task of the micro-batch runs, if given --, Spark's gaps last ``gap_s``; ``says_coming``: each task's
    producer says its rows are coming (``Producer.will_send``), as the Spark helpers' do."""
    rnd, keeper_rnd = random.Random(seed), random.Random(-seed)   # (the tasks drawn alike whatever the keepers)
    clock = ManualClock()
    _, parts = world(clock, WORKERS)
    keeps_at = [0.0] * WORKERS
    tasks: list[list | None] = [None] * WORKERS   # per worker: [rows left, first send at, producer]
    admitted: list[tuple[float, int]] = []
    t0 = next_batch_s = clock.now_s()
    while clock.now_s() < t0 + span_s:
        busy = busy_keeper_apart_s is not None and any(t is not None for t in tasks)
        for w, p in enumerate(parts):
            if clock.now_s() >= keeps_at[w]:
                p.grant_keeper.run_once()
                keeps_at[w] = clock.now_s() + keeper_rnd.uniform(*(busy_keeper_apart_s if busy else keeper_apart_s))
        clock.advance(0.0)   # (a pool topped up releases its producer now, as the real scheduler's thread does)
        now = clock.now_s()
        if all(t is None for t in tasks) and now >= next_batch_s:
            for w in range(WORKERS):
                tasks[w] = [ROWS // WORKERS + (w < ROWS % WORKERS), now + rnd.uniform(*START_S), None]
        for w in rnd.sample(range(WORKERS), WORKERS):
            task = tasks[w]
            if task is None or now < task[1]:
                continue
            if task[2] is None:
                task[2] = parts[w].producer(TOPIC)
                if says_coming:
                    task[2].will_send(task[0])
            while task[0] > 0:
                size = min(SEND, task[0])
                if not task[2].try_acquire(size):   # (refused while it waits: its pool tells the send it waits on)
                    break
                task[0] -= size
                if now >= t0 + WARM_UP_S:
                    admitted.append((now, size))
            if task[0] <= 0:
                tasks[w] = None   # its producer dies with this reference (no cyclic collection: it took 90 s in CI)
                if all(t is None for t in tasks):
                    next_batch_s = now + rnd.uniform(*gap_s)
        clock.advance(STEP_S)
    return sum(n for _, n in admitted) / (LIMIT * (span_s - WARM_UP_S)), worst_window(admitted) / LIMIT


def test_sixteen_micro_batch_workers_hold_the_limit_and_use_it() -> None:
    runs = [_simulate(seed, 15.0) for seed in range(2)]
    assert min(m for m, _ in runs) >= 0.99, runs
    assert max(w for _, w in runs) <= (LIMIT * 1.05 + SEND) / LIMIT, runs   # 1.137-1.149 before


def test_sixteen_workers_whose_keepers_ask_tens_of_milliseconds_apart_still_hold_the_limit() -> None:
    # (two cores running sixteen Python workers, a JVM and the control plane: each keeper's round comes late)
    runs = [_simulate(seed, 15.0, keeper_apart_s=(0.02, 0.04)) for seed in (5, 9)]
    assert max(w for _, w in runs) <= (LIMIT * 1.05 + SEND) / LIMIT, runs   # 1.085, 1.088 when a task's first ask
    assert min(m for m, _ in runs) >= 0.99, runs                            # said no send


def test_sixteen_workers_whose_keepers_ask_up_to_80_ms_apart_use_the_limit_and_hold_it() -> None:
    # where the keepers are later still, what repays a task's debt (its last send overdrew) was counted twice, as
    # told spends and as fresh grants, and the last sends of each micro-batch waited on that: seeds 9 and 10 read
    # 0.917 of the limit so. Counted once, the next task's first sends ran ahead of what its first ask said -- the
    # last send that waited, the remainder of the task before (12 of sends of 25): seed 4 read 1.088
    runs = {seed: _simulate(seed, 15.0, keeper_apart_s=(0.04, 0.08)) for seed in (4, 9, 10)}
    assert max(w for _, w in runs.values()) <= (LIMIT * 1.05 + SEND) / LIMIT, runs
    assert min(runs[9][0], runs[10][0]) >= 0.97, runs


def test_sixteen_workers_whose_gaps_stretch_draw_each_micro_batch_soon_enough_to_use_the_limit() -> None:
    # Spark's gaps of 0.4-0.6 s (a driver that commits each micro-batch, a busy host): each task of 62 rows drew its
    # fair chunks of 15.6 an ask at a time, four or five asks, and the micro-batch took so long to draw the window's
    # room that its end and the next gap came after the window had slid (six seeds: 0.947 of the limit, down to
    # 0.917); in three of its sends a chunk, 0.986
    runs = [_simulate(seed, 15.0, keeper_apart_s=(0.03, 0.06), gap_s=(0.4, 0.6)) for seed in range(6)]
    assert sum(m for m, _ in runs) / len(runs) >= 0.975, runs
    assert max(w for _, w in runs) <= (LIMIT * 1.05 + SEND) / LIMIT, runs


def test_sixteen_workers_whose_keepers_are_starved_while_the_tasks_run_draw_each_task_in_one_answer() -> None:
    # two cores running sixteen tasks: a keeper's thread gets the CPU 0.1-0.3 s late while they run (traced on the
    # benchmark). A chunk of three sends drew a task's last send of 12 on a debt of 9 36 tokens where it needed 21,
    # the next task's first ask wanted that 36 for a task of 62, and finished tasks held the rest until their
    # keepers ran: four seeds read 0.656 of the limit. Told each task's share as its chunk and what each producer
    # has in hand (the Spark helpers say it), 0.878
    runs = [_simulate(seed, 15.0, keeper_apart_s=(0.03, 0.06), gap_s=(0.5, 0.8), busy_keeper_apart_s=(0.1, 0.3),
                      says_coming=True) for seed in range(4)]
    assert sum(m for m, _ in runs) / len(runs) >= 0.85, runs
    assert max(w for _, w in runs) <= (LIMIT * 1.05 + SEND) / LIMIT, runs
