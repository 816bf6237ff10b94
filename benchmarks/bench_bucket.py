"""The token bucket's hot path: against the CPython floor (a no-op method call) and against the Python peers.

Single thread, ``timeit``, min of repeats. Every limiter gets a limit it never reaches (ints, 10^9 and more per
second), so what is timed is the cost of asking, not waiting. Each peer is used the way its documentation shows:

- ``token-bucket``: ``Limiter(rate, capacity, MemoryStorage())``, ``consume(key)``.
- ``limits``: ``FixedWindowRateLimiter`` / ``MovingWindowRateLimiter`` on ``MemoryStorage``,
  ``hit(parse("1000000000/second"), key)``.
- ``pyrate-limiter`` v4: ``Limiter(Rate(limit, Duration.SECOND))`` (its default in-memory sliding-window log) and
  ``limiter_factory.create_token_bucket_limiter`` (its GCRA state bucket), ``try_acquire(name, blocking=False)``.

Run alone: ``python -m benchmarks --only bucket``.
"""

from __future__ import annotations

import timeit
from typing import Any

from limiter import AsyncTokenBucket, SystemClock

from .common import row

SECTION = "bucket"
HUGE = 10**12  # a rate and capacity no benchmark reaches; an int keeps CPython's int fast paths


class Noop:
    def noop(self, n=1):
        pass


def _time(obj: Any, stmt: str, target_s: float, repeat: int) -> float:
    """ns per execution of ``stmt`` (with ``o`` a local bound to ``obj``), min of ``repeat`` runs."""
    setup = "o = obj"
    env = {"obj": obj}
    probe = timeit.timeit(stmt, setup=setup, number=200, globals=env) / 200
    number = max(200, int(target_s / max(probe, 1e-9)))
    return min(timeit.repeat(stmt, setup=setup, number=number, repeat=repeat, globals=env)) / number * 1e9


def _peers() -> list[tuple[str, Any, str]]:
    """(label, object, statement) for each peer, configured as its docs show, with a limit never reached."""
    import limits
    import pyrate_limiter
    import token_bucket
    from limits.storage import MemoryStorage
    from limits.strategies import FixedWindowRateLimiter, MovingWindowRateLimiter

    item = limits.parse("1000000000/second")
    peers: list[tuple[str, Any, str]] = [
        ("token-bucket Limiter.consume (MemoryStorage)",
         token_bucket.Limiter(10**9, 10**9, token_bucket.MemoryStorage()), "o.consume('k')"),
        ("limits FixedWindowRateLimiter.hit (memory)",
         (FixedWindowRateLimiter(MemoryStorage()), item), "o[0].hit(o[1], 'k')"),
        ("limits MovingWindowRateLimiter.hit (memory)",
         (MovingWindowRateLimiter(MemoryStorage()), item), "o[0].hit(o[1], 'k')"),
        ("pyrate-limiter Limiter.try_acquire (in-memory log)",
         pyrate_limiter.Limiter(pyrate_limiter.Rate(10**9, pyrate_limiter.Duration.SECOND)),
         "o.try_acquire('k', blocking=False)"),
        ("pyrate-limiter Limiter.try_acquire (token bucket)",
         pyrate_limiter.limiter_factory.create_token_bucket_limiter(rate_per_duration=10**9),
         "o.try_acquire('k', blocking=False)"),
    ]
    return peers


def _admits(obj: Any, stmt: str) -> bool:
    return bool(eval(stmt, {"o": obj}))  # noqa: S307 - our own fixed statements


def run(quick: bool = False) -> list[dict[str, Any]]:
    target_s, repeat, rounds = (0.01, 3, 1) if quick else (0.05, 3, 5)
    rows: list[dict[str, Any]] = []

    bucket = AsyncTokenBucket(rate=HUGE, capacity=HUGE, clock=SystemClock())
    noop = Noop()
    cases = {"empty": (None, "pass"), "noop": (noop, "o.noop(1)"), "ours": (bucket, "o.consume_and_check(1)"),
             "deque": (bucket, "o.consume_and_check(3)")}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):  # interleaved, so a slow spell of the machine hits every case alike
        for key, (obj, stmt) in cases.items():
            best[key] = min(best[key], _time(obj, stmt, target_s, repeat))
    empty_ns, noop_ns, ours_ns, deque_ns = best["empty"], best["noop"], best["ours"], best["deque"]
    assert bucket.consume_and_check(1), "the benchmark bucket must never throttle"

    net = (ours_ns - empty_ns) / (noop_ns - empty_ns)
    gross = ours_ns / noop_ns
    rows.append(row(SECTION, "consume_and_check(1) vs a no-op method call", net, "x no-op call", "<= 3x",
                    net <= 3.0,
                    f"{ours_ns:.1f} ns vs no-op {noop_ns:.1f} ns, both less timeit's empty loop ({empty_ns:.1f} ns);"
                    f" with the loop counted in both: {gross:.2f}x"))
    deque_net = (deque_ns - empty_ns) / (noop_ns - empty_ns)
    rows.append(row(SECTION, "consume_and_check(3) (deque channel) vs a no-op method call", deque_net,
                    "x no-op call", note=f"{deque_ns:.1f} ns per call"))

    ours_ops = 1e9 / ours_ns
    rows.append(row(SECTION, "AsyncTokenBucket.consume_and_check(1), 1 thread", ours_ops, "ops/s",
                    note="SystemClock, non-binding int rate/capacity"))
    fastest: tuple[float, str] = (0.0, "")
    for label, obj, stmt in _peers():
        ns = _time(obj, stmt, target_s, repeat)
        if not _admits(obj, stmt):
            raise RuntimeError(f"{label} refused under a non-binding limit: the comparison would be wrong")
        ops = 1e9 / ns
        rows.append(row(SECTION, label, ops, "ops/s", note=f"ours is {ours_ops / ops:.1f}x this"))
        fastest = max(fastest, (ops, label))
    ratio = ours_ops / fastest[0]
    rows.append(row(SECTION, "AsyncTokenBucket vs the fastest peer", ratio, "x ops/s", ">= 5x fastest peer",
                    ratio >= 5.0, f"fastest peer: {fastest[1]}"))
    return rows
