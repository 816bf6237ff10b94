"""How long a report that arrives now waits for the event loop: the 99th percentile over a window, measured.

Why
---
The reports are answered on the event loop, one at a time, and a report's latency is its wait for the loop plus
its own CPU. The report pace (``controlplane.report_pace``) keeps the reports' share of the core below the one at
which a model of their queue (M/D/1) puts the p99 within its goal. The model knows the reports only; the loop also
runs the heap's sweeps, grant answers, the history's closing of past slots, metrics reads, and the OS gives the
core to other processes. Measured on 1,000 participants of 100 limits (4.2 ms a report at 80 % of a core), the
p99 was 122 ms where the model said 43 ms; at 63 % of a core, 34 ms where it said 16. So the pace measures the
wait too.

How
---
``LoopLag.run`` sleeps ``period_s`` (10 ms) on the loop, again and again, and notes how late each wake-up came:
``lag_s``. A wake-up late by ``L`` means the loop was busy for the ``L`` seconds after the timer was due, so a
report that arrived in them waited for the loop from ``L`` down to nothing. Over a window of ``T`` seconds, the
time in which an arriving report would wait longer than ``x`` is then ``sum(max(0, L_i - x))``, and the reports
of many participants, each periodic at its own phase, arrive at random moments (they see the time average): the
99th percentile of their wait is the ``x`` at which that sum is 1 % of ``T`` (``p99_wait_s``). A busy stretch that
began before its timer was due is counted from the due time on: the estimate errs short by at most a period.

Worked example: a window of 5 s in which one sweep held the loop 0.5 s and every other wake-up was on time:
0.5 - x = 0.05 s, the p99 wait is 0.45 s (an arrival in the first 0.45 s of the sweep waited longer than that --
9 % of the window's reports were held up, though only one wake-up of 500 was late). Reports queueing at 80 % of
a core, wake-ups late by up to 60 ms: the x at which the lags' excess over it sums to 50 ms.

The loop's lag does not see every wait. A report on a new connection first waits in the kernel's queue of
connections not yet accepted, and uvloop accepts one connection per turn of the loop: where each turn answers one
report, connections are accepted as fast as reports are answered, so a queue of new connections is not work the
loop holds. 5,000 participants of a hundred limits, all sending at once, filled that queue (2,048 connections) and
their reports waited 4-13 s before the loop ever saw them, with wake-ups 10-20 ms late. So the probe also notes
the share of a core the process spent over each second, ``busy_share``: a core that is full is behind though
the wake-ups come on time (``controlplane.api_participant`` then stops working on reports whose senders gave up).

Not thread-safe: one loop runs the probe and the reports, and reads it (``take``) between them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from limiter.checks import positive

__all__ = ["LoopLag", "PERIOD_S", "BUSY_WINDOW_S", "p99_wait_s"]

PERIOD_S = 0.01   # a wake-up every 10 ms: 100 a second, a few microseconds each
BUSY_WINDOW_S = 1.0   # busy_share is the process's CPU over the last this long


def p99_wait_s(lags_s: list[float], window_s: float, share: float = 0.01) -> float:
    """The wait exceeded for ``share`` of ``window_s`` by a loop whose wake-ups came ``lags_s`` late (see the
    module essay): the ``x`` at which ``sum(max(0, lag - x))`` is ``share x window_s``; 0 when even x = 0 is."""
    budget = share * window_s
    excess = 0.0   # sum of (lag - x) over the lags above x, as x falls from the largest lag down
    above = 0      # how many lags are above x
    ordered = sorted(lags_s, reverse=True)
    for i, lag in enumerate(ordered):
        above = i + 1
        nxt = ordered[i + 1] if i + 1 < len(ordered) else 0.0
        # from x = lag down to x = nxt, the excess grows by `above` per second
        if excess + above * (lag - nxt) >= budget:
            return lag - (budget - excess) / above
        excess += above * (lag - nxt)
    return 0.0


class LoopLag:
    """The probe (see the module essay): ``run`` on the loop; ``take`` the p99 wait of the window since the last
    take. ``clock``: the loop's own (monotonic seconds) unless given; ``cpu_clock``: the process's CPU seconds."""

    def __init__(self, period_s: float = PERIOD_S, clock: Callable[[], float] | None = None,
                 cpu_clock: Callable[[], float] = time.process_time, busy_window_s: float = BUSY_WINDOW_S) -> None:
        if isinstance(period_s, bool) or not (isinstance(period_s, int | float) and 0 < period_s <= 1):
            raise ValueError(f"period_s must be a number of seconds > 0 and <= 1, got {period_s!r}")
        positive("busy_window_s", busy_window_s, unit="seconds")
        self.period_s = period_s
        self.busy_window_s = busy_window_s
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._lags: list[float] = []
        self.last_s = 0.0   # the latest wake-up's lateness: how far behind the loop is now
        self.busy_share = 0.0   # the share of a core the process spent over the last complete busy_window_s
        self._busy_since: tuple[float, float] | None = None   # (clock, cpu) where the current second began

    def observe(self, lag_s: float) -> None:
        self.last_s = max(0.0, lag_s)
        self._lags.append(self.last_s)

    def sample_cpu(self, now_s: float) -> None:
        """Note the process's CPU at ``now_s`` (the probe's clock); ``busy_share`` moves at each whole
        ``busy_window_s``."""
        cpu_s = self._cpu_clock()
        if self._busy_since is None:
            self._busy_since = (now_s, cpu_s)
            return
        since_s, since_cpu_s = self._busy_since
        if now_s - since_s >= self.busy_window_s:
            self.busy_share = max(0.0, cpu_s - since_cpu_s) / (now_s - since_s)
            self._busy_since = (now_s, cpu_s)

    def take(self, window_s: float) -> float | None:
        """The p99 wait over the last ``window_s`` seconds, from the wake-ups since the last take (None: none came,
        the probe is not running); starts the next window."""
        lags, self._lags = self._lags, []
        return p99_wait_s(lags, window_s) if lags else None

    async def run(self) -> None:
        """Sleep ``period_s`` and note the lateness, until cancelled."""
        clock = self._clock if self._clock is not None else asyncio.get_running_loop().time
        while True:
            due = clock() + self.period_s
            await asyncio.sleep(self.period_s)
            now = clock()
            self.observe(now - due)
            self.sample_cpu(now)
