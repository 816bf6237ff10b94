"""Limiters nothing has used for a while are forgotten, so a worker's rounds cost what its live limits cost.

How it works and why
--------------------
PySpark reuses a Python worker across tasks and jobs, and its participant keeps a limiter per (level, name) for
as long as the worker lives. A job that writes to topics of its own (a tenant or a topic per run, a topic per
day) leaves a tenant, a namespace and a topic limiter behind in every worker it ran in, and the grant keeper
(every 20 ms) and the reporter (every interval) look at each of them at every round. Measured (one live pool, a
keeper round's CPU): 0.13 ms alone, 1.27 ms after 45 earlier jobs of a topic each (139 limiters), 2.0 ms after
90; a report 0.34 ms, 7.5 ms and 11.5 ms -- on the GIL the task's own thread waits for, and a keeper whose rounds
grow long stretches its beat, so a pool is topped up later.

So the reporter, after each answered round, forgets every limiter that for ``FORGET_IDLE_S`` admitted nothing,
had no producer or dispatcher bound, nobody queued and no tokens held (an idle pool gives its tokens back within
a second or so: until it has, it stays). The registry removes it only if, under its lock, still nothing is bound
to it (``limiter.registry.forget_unbound``); the next producer of that topic gets a new limiter at the rate the
policies give it then (the registries' ``initial_rate``), as the first one did. What goes with it: its
cumulative counters (a counter of that limiter read by Prometheus starts again from zero, a reset that
``rate()`` handles) and the send size it learnt. The broker's limiter stays: every producer passes it. Not while
the control plane is unreachable: the outage rules keep the splits last answered for the limiters there are.

``FORGET_IDLE_S`` is long beside anything a stream does between two micro-batches or a batch job between two
tasks, so a limiter in use is never forgotten and made again; a stream that triggers every few minutes makes
its limiters again at each micro-batch, which costs a lookup and, for a pool, the ask its first send makes anyway
after such a gap.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["IdleLimiters", "FORGET_IDLE_S"]

FORGET_IDLE_S = 60.0


class IdleLimiters:
    """Which limiters have been idle for ``idle_s``: told each round what each admitted so far and whether anything
    holds it (``look``, every limiter, then ``end_round``), by a key of the caller's (direction, level, name)."""

    def __init__(self, idle_s: float = FORGET_IDLE_S):
        if not idle_s > 0:
            raise ValueError(f"idle_s must be a number of seconds > 0, got {idle_s!r}")
        self.idle_s = float(idle_s)
        self._moved: dict[Hashable, tuple[float, float]] = {}   # key -> (admitted so far, when that last moved)
        self._looked: set[Hashable] = set()   # the keys looked at since the last ``end_round``

    def look(self, key: Hashable, admitted: float, held: bool, now_s: float) -> bool:
        """Whether the limiter of ``key`` has been idle for ``idle_s``: it admitted ``admitted`` so far (the same
        total since then) and nothing holds it now (``held``: a producer or dispatcher bound, a queue, tokens)."""
        self._looked.add(key)
        last = self._moved.get(key)
        if held or last is None or last[0] != admitted:
            self._moved[key] = (admitted, now_s)
            return False
        return now_s - last[1] >= self.idle_s

    def end_round(self) -> None:
        """A round looked at every limiter there is: forget what was seen of the ones it did not (gone from the
        registries -- one made again under the same key is seen afresh)."""
        for key in [k for k in self._moved if k not in self._looked]:
            del self._moved[key]
        self._looked.clear()
