"""The control plane's side of an adaptive limit: one ``limiter.adaptive.AdaptiveRate`` per adaptive shared limit,
fed by every participant's outcomes, and a short trace of it for the dashboard.

``AdaptiveLimit.learn`` takes one grant ask's outcomes (``GrantAsk.outcomes``: what the sink answered that
participant since its last ask, and the slowest send it took -- slower than the policy's ``adaptiveSlowMs``, that
is congestion too) and returns the messages capacity per period the grant window grants under now --
the rate learnt, never above the configured limit (the ceiling) nor below the floor -- and what is left of a pause
the sink asked for (Retry-After), which the grant book answers to every asker. The grant book also tells the rate
when the last holder gave back and when one wants tokens again (``AdaptiveRate.idle`` and ``busy``, on the
limit's ``rate``): the sink is not asked in between, and what it delivered is read over the rest. A change of the
configured ceiling or floor (an operator's) resets the rate to the ceiling at once. ``trace`` keeps one point a
second (when anyone asks) for ``TRACE_S`` seconds: the rate learnt, the ceiling and the sink's answers.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from limiter.adaptive import AdaptiveRate, Outcome
from limiter.policy import Rate
from protocol import GrantAsk

__all__ = ["AdaptiveLimit", "TRACE_S", "MIN_PER_S"]

TRACE_S = 900        # points of a second each
MIN_PER_S = 1e-3     # the capacity never reaches 0 (which reads as "not limited")


class AdaptiveLimit:
    """One adaptive limit (see the module essay). Not thread-safe: the grant book serialises."""

    def __init__(self, ceiling_per_s: float, floor_per_s: float, now: float):
        self.rate = AdaptiveRate(ceiling_per_s, floor_per_s, now_s=now)
        # (monotonic s, rate learnt, ceiling, sends ok, sends throttled)
        self._trace: deque[tuple[float, float, float, int, int]] = deque(maxlen=TRACE_S)

    def learn(self, rate: Rate, floor_per_s: float, slow_s: float | None, ask: GrantAsk, now: float
              ) -> tuple[float, float]:
        """(messages capacity per period, seconds of pause left) after ``ask``'s outcomes, under ``rate``'s
        messages limit (the ceiling) and ``floor_per_s``; a send taken slower than ``slow_s`` is congestion."""
        adaptive = self.rate
        ceiling_per_s = rate.msgs / rate.period_s
        if (adaptive.ceiling_per_s, adaptive.floor_per_s) != (ceiling_per_s, floor_per_s):
            adaptive.set_ceiling(ceiling_per_s, floor_per_s)   # the operator's change wins at once
        adaptive.slow_s = slow_s
        said = ask.outcomes
        if said is not None:
            if said.ok > 0:
                adaptive.observe(Outcome.OK, said.ok, now, latency_s=said.slowest_s)
            if said.errors > 0:
                adaptive.observe(Outcome.ERROR, said.errors, now)
            if said.throttled > 0:
                adaptive.observe(Outcome.THROTTLED, said.throttled, now, retry_after_s=said.retry_after_s)
        learnt = adaptive.rate_per_s(now)
        if not self._trace or now - self._trace[-1][0] >= 1.0:
            self._trace.append((now, learnt, adaptive.ceiling_per_s, adaptive.ok, adaptive.throttled))
        return min(rate.msgs, self._granted_per_s(learnt) * rate.period_s), adaptive.paused_for_s(now)

    def per_s(self, now: float) -> float:
        """The messages per second it grants under now."""
        return self._granted_per_s(self.rate.rate_per_s(now))

    def _granted_per_s(self, learnt_per_s: float) -> float:
        return max(learnt_per_s, self.rate.floor_per_s, MIN_PER_S)

    def view(self, now: float) -> dict[str, Any]:
        snap = self.rate.snapshot(now)
        return {"ratePerSecond": snap.rate_per_s, "ceilingPerSecond": snap.ceiling_per_s,
                "floorPerSecond": snap.floor_per_s, "pausedForSeconds": snap.paused_for_s,
                "changedBy": snap.changed_by, "ok": snap.ok, "throttled": snap.throttled, "errors": snap.errors}

    def trace(self, now: float, wall: float) -> list[dict[str, float]]:
        """The trace's points: unix time (``wall`` is the unix time at ``now``), the rate learnt (0 while paused),
        the ceiling, and the sink's answers per second since the point before."""
        points, before = [], None
        for t, learnt, ceiling, ok, throttled in self._trace:
            span = t - before[0] if before else 0.0
            points.append({"t": wall - (now - t), "ratePerSecond": learnt, "ceilingPerSecond": ceiling,
                           "okPerSecond": (ok - before[3]) / span if before and span > 0 else 0.0,
                           "throttledPerSecond": (throttled - before[4]) / span if before and span > 0 else 0.0})
            before = (t, learnt, ceiling, ok, throttled)
        return points
