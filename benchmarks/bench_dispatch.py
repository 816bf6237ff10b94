"""Dispatch accuracy: achieved rate against the limit over 10 periods, simulated on a ManualClock.

Pulsar users have seen 11.9x a bytes limit (#18699) and 58x a message limit with batching (#4777), and
subscriptions sharing a topic ignore its limit (#8599). Each scenario below runs ``limiter.dispatch`` for 10 rate
periods of 1 s in 10 ms steps; in every step each subscription that is not backing off plans up to 3 reads, and
all plans of a round are made before any is delivered and charged (the worst interleaving). Entries are batches
of 1-20 messages and 200-40,000 bytes. The goal: achieved / limit within 5 % over the 10 periods.

Run: ``python -m benchmarks.bench_dispatch``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from limiter.clock import ManualClock
from limiter.dispatch import Dispatcher, DispatchRateLimiter
from limiter.paced import PacedDispatcher
from limiter.policy import Level, Rate

PERIODS = 10
STEP_S = 0.01
GOAL = (0.95, 1.05)


def simulate(clock: ManualClock, dispatchers: list[Dispatcher], seed: int, periods: int = PERIODS,
             reads_per_step: int = 3) -> list[dict[str, list[int]]]:
    """Per dispatcher, msgs/bytes/entries delivered in each period."""
    rng = random.Random(seed)
    paced = [PacedDispatcher(d, clock) for d in dispatchers]
    out = [{"msgs": [0] * periods, "bytes": [0] * periods, "entries": [0] * periods} for _ in dispatchers]
    for step in range(round(periods / STEP_S)):
        period = int(step * STEP_S + 1e-9)
        for _ in range(reads_per_step):
            # Every plan of the round before any delivery: the worst interleaving.
            plans = [(i, d, plan) for i, d in enumerate(paced) if (plan := d.plan_read(1000)) is not None]
            for i, d, plan in plans:
                entries = [(rng.randint(1, 20), rng.randint(200, 40_000)) for _ in range(plan.entries)]
                msgs, bytes_ = sum(m for m, _ in entries), sum(b for _, b in entries)
                d.charge(msgs, bytes_, plan.entries, plan)
                for key, value in (("msgs", msgs), ("bytes", bytes_), ("entries", plan.entries)):
                    out[i][key][period] += value
        clock.advance(STEP_S)
    return out


def _row(name: str, achieved: float, limit: float) -> dict[str, Any]:
    ratio = achieved / limit
    return {"name": name, "value": round(ratio, 4), "unit": "x limit", "goal": f"{GOAL[0]}-{GOAL[1]}",
            "ok": GOAL[0] <= ratio <= GOAL[1]}


def _lim(clock: ManualClock, level: Level, msgs: float = -1, bytes_: float = -1) -> DispatchRateLimiter:
    return DispatchRateLimiter(Rate(msgs, bytes_), level, level.value, clock)


def scenarios() -> list[tuple[str, Callable[[], list[dict[str, Any]]]]]:
    def msgs_batched():
        clock = ManualClock()
        (res,) = simulate(clock, [Dispatcher(topic=_lim(clock, Level.TOPIC, msgs=1000))], seed=4777)
        return [_row("batched entries, 1000 msgs/s topic limit (#4777: 58x)", sum(res["msgs"]), 1000 * PERIODS)]

    def bytes_varying():
        clock = ManualClock()
        (res,) = simulate(clock, [Dispatcher(topic=_lim(clock, Level.TOPIC, bytes_=1_000_000))], seed=18699)
        return [_row("entries of varying size, 1 MB/s topic limit (#18699: 11.9x)", sum(res["bytes"]),
                     1_000_000 * PERIODS)]

    def shared_topic():
        clock = ManualClock()
        topic = _lim(clock, Level.TOPIC, msgs=1000, bytes_=4_000_000)
        subs = [Dispatcher(topic=topic, subscription=_lim(clock, Level.SUBSCRIPTION, msgs=500)) for _ in range(3)]
        res = simulate(clock, subs, seed=8599)
        total = sum(sum(r["msgs"]) for r in res)
        rows = [_row("3 subscriptions sharing a 1000 msgs/s topic limit (#8599)", total, 1000 * PERIODS)]
        worst = max(sum(r["msgs"][p] for r in res) for p in range(PERIODS))  # the topic's busiest period
        rows.append({"name": "  the same, topic's busiest single period", "value": round(worst / 1000, 4),
                     "unit": "x limit", "goal": "<=1.2 (+1 read)", "ok": worst <= 1200})
        return rows

    def subscription_bound():
        clock = ManualClock()
        topic = _lim(clock, Level.TOPIC, msgs=3000)
        limits = [(400, -1), (-1, 800_000), (300, 10_000_000)]  # msgs/s, bytes/s; each binds on its first dim.
        subs = [Dispatcher(topic=topic, subscription=_lim(clock, Level.SUBSCRIPTION, msgs=m, bytes_=b))
                for m, b in limits]
        res = simulate(clock, subs, seed=1)
        ratios = [sum(r["msgs"]) / (m * PERIODS) if m > 0 else sum(r["bytes"]) / (b * PERIODS)
                  for r, (m, b) in zip(res, limits, strict=True)]
        far = max(ratios, key=lambda ratio: abs(ratio - 1))
        return [_row("3 subscriptions held by their own limits (400 msgs/s; 800 kB/s; 300 msgs/s)", far, 1)]

    def count_entries():
        clock = ManualClock()
        d = Dispatcher(topic=_lim(clock, Level.TOPIC, msgs=100), dispatch_throttling_on_batch_message=True)
        (res,) = simulate(clock, [d], seed=7)
        return [_row("dispatch_throttling_on_batch_message: 100 entries/s", sum(res["entries"]), 100 * PERIODS)]

    return [("msgs_batched", msgs_batched), ("bytes_varying", bytes_varying), ("shared_topic", shared_topic),
            ("subscription_bound", subscription_bound), ("count_entries", count_entries)]


def run(report: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for _, scenario in scenarios():
        for row in scenario():
            rows.append(row)
            if report is not None:
                report(row)
    return rows


def main() -> list[dict[str, Any]]:
    started = time.perf_counter()
    rows = run()
    width = max(len(r["name"]) for r in rows)
    print(f"{'scenario':<{width}}  {'value':>8}  {'unit':<18} {'goal':<15} ok")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['value']:>8.4f}  {r['unit']:<18} {r['goal']:<15} {'yes' if r['ok'] else 'NO'}")
    print(f"({PERIODS} periods simulated per scenario on a ManualClock; {time.perf_counter() - started:.2f} s)")
    return rows


if __name__ == "__main__":
    main()
