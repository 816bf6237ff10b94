"""How often participants are told to report: the configured interval, stretched when reports would take more
than their share of the control plane's one core.

Why
---
Every participant reports every interval; the report is its heartbeat and what the dashboard and the metrics show
(the tokens of shared limits come between reports, from the grants). A report costs the control plane CPU that
grows with the limits in it: about 0.4 ms for one limit, 0.6 ms for ten, 1.9 ms for a hundred, 12 ms for a thousand
(``benchmarks/bench_scale.py``'s curve). One process has one core (the GIL): 3,000 participants of one limit, or
1,000 of a hundred, reporting every second, need more than it has, and then every report queues behind the others
(a p99 of seconds, reports dropped). Doorman's server tells each client its refresh interval; Pulsar's brokers
publish usage at a fixed interval. Here the answer to each report already says the interval to report at
(``reportIntervalSeconds``), and participants follow it: so the control plane stretches it when it must.

The rule
--------
``ReportPace`` measures, over windows of ``window_s`` (5 s) with at least ``MIN_REPORTS`` answered, the CPU a
report costs: the process's CPU in the window, less what answering grant asks took (those are paced by the grants'
own rules, ``controlplane.ask_pace``), divided by the reports answered. All the rest of the process's CPU (the
heap's sweeps, the metrics, other reads) is counted against the reports: the estimate errs long. The interval the
reports need is then

    needed_s = participants x cpu_per_report_s / cpu_share

the time in which every participant's report fits into ``cpu_share`` of a core -- or, in a window whose process
CPU took ``FULL_SHARE`` (0.9) of the core or more, where that is longer, the interval told now times the share of
the core the reports took in the window, over ``cpu_share`` (a core the reports fill answers fewer of them than are
due). Below that every report due was answered, and that measure counts the reports of participants still on the
interval told before: after the start-up of 1,000 participants of a hundred limits, told 9 s, half of them still
on 3 s, the reports took 51 % of a core at a share of 36 %, and it read 13 s where 7 s was needed (and every step
up is a step to come back down). ``participants`` is the more of those live and those that reported in the window:
participants whose reports wait in a full core's queue for 2 intervals expire, and the live ones alone read low (3
s for 1,000 participants of a hundred limits, where 5 s was needed). The interval told is
``needed_s`` rounded up to a whole number of ``floor_s`` (the configured interval), within ``floor_s..most_s``:
steps, so that participants are not told a new interval at every window (each logs the change). It stretches at
once; it shrinks only when the shorter step would still leave a fifth of the share free (``needed_s x 1.25`` fits
in it) by every one of the last ``SHRINK_WINDOWS`` (6) windows' measures, so that a load near a step's edge does
not flip between two intervals, and one quiet window does not undo what the busier ones before it measured: the
CPU a report costs is not the same in every window (5,000 participants of a hundred limits, told 30 s: 1.9-2.0 ms
in two windows, 2.4-3.7 ms in others, where a scrape of their 500,000 series or a full collection of a 5-GB heap
fell), and told 16 s from the quiet windows' measure, the core filled and the reports queued for a second.

Where reports are slow, ``cpu_share`` is not what holds their latency: 100 participants of 1,000 limits, 28 ms a
report at 70 % of a core, read a p99 of 215-380 ms, most of it queueing. The reports of many participants, each
periodic with a phase of its own, are taken as a Poisson stream (the places in the interval the control plane tells
them, ``controlplane.report_phase``, spread them more evenly where they are followed: the model errs long), each
served in ``c`` = ``cpu_per_report_s``: an M/D/1 queue, whose mean wait at a share ``r`` of the core is
``r c / (2 (1 - r))``; its 99th percentile is taken as ln 100 (4.6) times that (an exponential tail). So the share
is also at most the one at which ``c`` plus that stays within ``p99_goal_s`` (0.1 s), ``waiting_share``:
``1 / (1 + 4.6 c / (2 (p99_goal_s - c)))`` -- above ``cpu_share`` (0.8) up to 10 ms a report, so it changes nothing
for reports of up to about a hundred limits; 0.53 at 28 ms, 0.30 at 50 ms; at a report as slow as the goal (a
participant of 5,000 limits: 125 ms) none is enough, and the interval goes to ``most_s``.

The model knows the reports only, and the loop runs more (``controlplane.loop_lag``): on 1,000 participants of 100
limits, 4.2 ms a report at 80 % of a core, the p99 read 122 ms where it says 43. So where the loop's wait is
measured (``waits``: the p99 wait of the window, ``LoopLag.take``), a p99 over the goal -- the measured wait plus a
report's own CPU -- while the window's CPU took at least ``QUEUE_SHARE`` (0.3) of the core lowers a cap on the
share. The model's wait, scaled to the one measured at the window's share ``b``, comes down to the goal less a
report's CPU at the share ``r`` with ``r / (1 - r) = b / (1 - b) x (p99_goal_s - c) / wait``, and the cap is
multiplied by ``r / b`` (so a cap that moved the interval by less than a step moves it further the next window; at
most halved at once, never below 0.05). Below 0.3 of the core a long wait is not the reports' queue (a sweep, a read
of thousands of limits), and stretching would not shorten it. The cap stays while the p99 stays over half the goal,
and is raised by a quarter at each window below that, up to ``cpu_share`` (from 0.05 to 0.8 in 13 windows), so the
interval steps back as the load falls. Worked example, 1,000 participants of 100 limits told 6 s, 4.2 ms a report: b
= 0.7, the p99 wait 118 ms; r / (1 - r) = 0.7 / 0.3 x 95.8 / 118 = 1.89, r = 0.654, the cap 0.8 x 0.654 / 0.7 =
0.748: 4.2 s / 0.748 = 5.6 s, told 6 s still; the next window measures the same, the cap goes to 0.699: 7 s.

A worked example: the configured interval 1 s, ``cpu_share`` 0.8 (the default), 3,000 participants of one limit,
0.38 ms a report: needed_s = 3,000 x 0.00038 / 0.8 = 1.43 s, told 2 s (reports take 57 % of the core). 600 of them
leave: needed_s = 1.14 s, x 1.25 = 1.43 s, which does not fit in 1 s: still 2 s. When 1,500 are left: 0.71 s,
x 1.25 = 0.89 s, which fits, but the windows before still say 1.43 s: told 1 s again once the last of them is 6
windows old.

Why not stretch sooner: stretched, a report costs more (the history fills in the slots it skipped, and what the
control plane does every second is shared by fewer reports: 30 participants of 1,000 limits, 19 ms a report at 1 s,
26 ms at 2 s), and a report's latency is mostly its own CPU while the core is not near full: at a share of 0.6 that
cell, 57 % of a core at 1 s, was told 2 s and its p99 went from 35 to 59-80 ms.

Consistency: the interval only ever changes at a window's end; a participant follows it from the answer to its
next report. Expiry and the history (``controlplane.state``) reckon with the longest interval any participant may
still be following (``LiveState.tell``). A participant's retries when the control plane is down do not lengthen
with it (``collectors.reporter``): a restarted control plane re-learns in the configured interval's time.

Not thread-safe; the reports are answered on the event loop, one at a time.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable

from limiter.checks import is_number, positive

__all__ = ["ReportPace", "FULL_SHARE", "MIN_REPORTS", "SHRINK_HEADROOM", "SHRINK_WINDOWS", "P99_GOAL_S",
           "QUEUE_SHARE", "waiting_share"]

log = logging.getLogger("controlplane")

MIN_REPORTS = 20        # reports a window must have answered for its CPU a report to count
SHRINK_HEADROOM = 1.25  # a shorter interval is told only when needed_s x this fits in it
SHRINK_WINDOWS = 6      # ... by the needed_s of each of this many latest windows (30 s of them)
P99_GOAL_S = 0.1        # the report latency the share is kept to, where reports are slow (see waiting_share)
P99_OF_MEAN_WAIT = math.log(100)   # a wait's 99th percentile over its mean (an exponential tail)
FULL_SHARE = 0.9        # a window whose process CPU took this much of a core may have answered fewer reports than due
QUEUE_SHARE = 0.3       # a measured wait over the goal caps the share only where the window took this much of a core
CAP_RAISE = 1.25        # a window whose p99 is under half the goal raises the cap by this much
LOWEST_CAP = 0.05       # the cap's floor (the least report_cpu_share allowed): 13 windows back up to 0.8


def waiting_share(cpu_per_report_s: float, p99_goal_s: float) -> float:
    """The most of a core reports costing ``cpu_per_report_s`` each may take for their p99 to stay within
    ``p99_goal_s`` (0 when one report alone takes that long; see the module essay)."""
    if cpu_per_report_s >= p99_goal_s:
        return 0.0
    a = P99_OF_MEAN_WAIT * cpu_per_report_s / (2 * (p99_goal_s - cpu_per_report_s))
    return 1 / (1 + a)


class ReportPace:
    """The report interval to tell participants (see the module essay). ``cpu_clock``: the process's CPU seconds;
    ``clock``: monotonic seconds; ``waits``: given a window's length, the p99 wait for the loop in it
    (``LoopLag.take``; None: not measured)."""

    def __init__(self, floor_s: float, most_s: float, cpu_share: float, *, window_s: float = 5.0,
                 p99_goal_s: float = P99_GOAL_S, cpu_clock: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic,
                 waits: Callable[[float], float | None] | None = None) -> None:
        positive("floor_s", floor_s, unit="seconds")
        positive("window_s", window_s, unit="seconds")
        positive("p99_goal_s", p99_goal_s, unit="seconds")
        if not (is_number(most_s) and most_s >= floor_s):
            raise ValueError(f"most_s must be a finite number of seconds >= floor_s ({floor_s:g}), got {most_s!r}")
        if not (is_number(cpu_share) and 0 < cpu_share <= 1):
            raise ValueError(f"cpu_share must be a fraction of a core > 0 and <= 1, got {cpu_share!r}")
        self.floor_s, self.most_s, self.cpu_share, self.window_s = floor_s, most_s, cpu_share, window_s
        self.p99_goal_s = p99_goal_s
        self.share = cpu_share   # the last window's: cpu_share, or less where reports are slow
        self.cap = cpu_share     # lowered while the measured p99 is over the goal
        self.wait_p99_s: float | None = None   # the last window's measure
        self._cpu_clock, self._clock, self._waits = cpu_clock, clock, waits
        self.told_s = floor_s
        self.cpu_per_report_s: float | None = None   # the last window's measure
        self._window_at, self._cpu_at = clock(), cpu_clock()
        self._reports = 0
        self._excluded_s = 0.0
        self._seen: set[str] = set()   # the participants that reported in the window
        self._needed: deque[float] = deque(maxlen=SHRINK_WINDOWS)   # the latest windows' needed_s over their share

    def exclude(self, cpu_s: float) -> None:
        """CPU spent on something paced by its own rules (a grant answer): not counted against the reports."""
        self._excluded_s += cpu_s

    def interval_s(self, participant_id: str, live: int) -> float:
        """Called once a report of ``participant_id`` answered, ``live`` participants live: the interval its
        answer tells."""
        self._reports += 1
        if self.most_s == self.floor_s:   # (not stretched: nothing to measure)
            return self.told_s
        self._seen.add(participant_id)
        now = self._clock()
        if now - self._window_at < self.window_s:
            return self.told_s
        cpu = self._cpu_clock()
        elapsed_s = now - self._window_at
        wait_p99_s = self._waits(elapsed_s) if self._waits is not None else None   # (taken every window: its own)
        if self._reports >= MIN_REPORTS:
            spent_s = max(0.0, cpu - self._cpu_at - self._excluded_s)
            self.cpu_per_report_s = spent_s / self._reports
            busy = (cpu - self._cpu_at) / elapsed_s   # the process's share of the core in the window
            participants = max(live, len(self._seen))
            self.wait_p99_s = wait_p99_s
            if self.wait_p99_s is not None:
                self._cap(self.wait_p99_s, busy)
            self.share = min(self.cpu_share, self.cap, waiting_share(self.cpu_per_report_s, self.p99_goal_s))
            needed_s = participants * self.cpu_per_report_s
            if busy >= FULL_SHARE:   # (only then may fewer reports than due be answered: what they took of the core
                needed_s = max(needed_s, self.told_s * spent_s / elapsed_s)   # at the interval told, then, too)
            self._needed.append(needed_s / self.share if self.share > 0 else math.inf)
            told = self.step_s(self._needed[-1], max(self._needed))
            if told != self.told_s:
                (log.warning if told > self.told_s else log.info)(
                    "reports of %d participants take %.2f ms of CPU each (%.0f %% of a core in the last %.0f s; "
                    "their share: %.0f %%; the loop's p99 wait: %s): participants are told to report every %g s "
                    "(was %g s)", participants, 1000 * self.cpu_per_report_s, 100 * spent_s / elapsed_s, elapsed_s,
                    100 * self.share, "not measured" if self.wait_p99_s is None else f"{1000 * self.wait_p99_s:.0f} ms",
                    told, self.told_s)
                self.told_s = told
        self._window_at, self._cpu_at, self._reports, self._excluded_s = now, cpu, 0, 0.0
        self._seen = set()
        return self.told_s

    def _cap(self, wait_p99_s: float, busy: float) -> None:
        """Lower the cap where the measured p99 is over the goal and the core busy, raise it where the p99 is
        under half the goal (see the module essay)."""
        c = self.cpu_per_report_s or 0.0
        if wait_p99_s + c > self.p99_goal_s and busy >= QUEUE_SHARE:
            if wait_p99_s <= 0:   # no wait measured: a report alone takes more than the goal; no cap shortens that
                return
            busy = min(busy, 0.99)
            g = busy / (1 - busy) * max(0.0, self.p99_goal_s - c) / wait_p99_s
            self.cap = max(self.cap / 2, self.cap * g / (1 + g) / busy, LOWEST_CAP)
        elif wait_p99_s + c < self.p99_goal_s / 2:
            self.cap = min(self.cpu_share, self.cap * CAP_RAISE)

    def step_s(self, needed_s: float, lately_s: float | None = None) -> float:
        """The interval to tell for ``needed_s``, from the one told now: stretch at once, shrink with headroom for
        ``lately_s`` (the most the latest windows needed; default: ``needed_s``)."""
        def up(seconds: float) -> float:
            if seconds == math.inf:
                return self.most_s
            return min(self.most_s, self.floor_s * max(1, math.ceil(seconds / self.floor_s - 1e-9)))
        longer = up(needed_s)
        lately_s = needed_s if lately_s is None else max(needed_s, lately_s)
        return longer if longer >= self.told_s else min(self.told_s, up(lately_s * SHRINK_HEADROOM))
