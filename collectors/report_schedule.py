"""When a participant's next report comes: the interval it follows, its place in it, and its backoff.

The reporter (``collectors.reporter``, a thread) keeps to these rules, and so does the load benchmark's generator
(``benchmarks.bench_load``, thousands of participants on one asyncio loop), so they share this one object. It does no
I/O and reads no clock: each call is told ``now`` (monotonic seconds).

- ``answered(interval_s, next_in_s, now)``: the control plane answered. Its ``reportIntervalSeconds`` is followed
  when it is an interval a participant may have (``MIN_INTERVAL_S`` .. ``MAX_INTERVAL_S``): the control plane
  stretches it when the reports would take too much of its CPU, and expires participants in its own intervals.
  Every participant told a new interval heard it at about the same time, so the round after a change comes after
  a random ``SPREAD_FROM`` to 1 + ``SPREAD_FROM`` of it (one interval on average: a change brings no extra
  reports). ``nextReportInSeconds``, this participant's place in the interval, is followed instead when the
  answer says one (``controlplane.report_phase``: the reports of all participants then reach the control plane
  spread evenly, not meeting at random) -- unless it is further off than any interval allows.
- a failed round waits the ``Backoff`` (exponential, capped, jittered) from the shorter of the interval told and
  the configured one: a restarted control plane re-learns in its configured interval's time, not in one it had
  stretched under load.
- ``next_due(ok, due, now)``: when the round after one due at ``due`` that ended at ``now`` comes.

Worked example: configured 1 s, told 4 s with no place: the next round comes 2-6 s after the last one's due time
(3 s with a random draw of 0.25), then every 4 s; a failed round then waits 0.5-1 s (the backoff from 1 s), then
1-2 s, ... up to its cap. Told 4 s and a place 5.3 s away: the next round comes 5.3 s after the answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .client import Backoff
from .config import MAX_INTERVAL_S, MIN_INTERVAL_S

__all__ = ["ReportSchedule", "SPREAD_FROM"]

# after a change of interval the next round comes after SPREAD_FROM + a random part of the new interval: a
# half to one and a half of it, one interval on average. (From nothing to one, each change brought half a report
# more of every participant: 5,000 participants of a hundred limits, told 30 s, 25 s and then 23 s, sent 293
# reports a second where 217 were due, and the core the control plane had measured room on was full.)
SPREAD_FROM = 0.5


class ReportSchedule:
    """One participant's report times: ``answered`` after each answered round, ``next_due`` after every round."""

    def __init__(self, interval_s: float, backoff_cap_s: Callable[[float], float],
                 rng: Callable[[], float] = random.random):
        self.interval_s = interval_s
        self.configured_s = interval_s
        self._backoff_cap = backoff_cap_s
        self.rng = rng
        self.backoff = Backoff(interval_s, backoff_cap_s(interval_s), rng)
        self.spread_next = False               # the interval changed: the next round is spread (SPREAD_FROM)
        self.told_due: float | None = None     # when the last answer said the next round comes (monotonic s)

    def answered(self, interval_s: float, next_in_s: float | None, now: float) -> bool:
        """The control plane answered a round at ``now``: its interval and place followed. True if the interval
        changed."""
        self.backoff.reset()
        changed = self._follow(interval_s)
        self.told_due = None
        # (a time beyond what any interval allows is not followed: the interval's own rules are)
        if next_in_s is not None and 0 <= next_in_s <= (1 + SPREAD_FROM) * MAX_INTERVAL_S:
            self.told_due = now + next_in_s
            self.spread_next = False   # (the place told spreads the rounds; a random one would undo it)
        return changed

    def next_due(self, ok: bool, due: float, now: float) -> float:
        """When the round after one due at ``due`` that ended at ``now`` comes (never before ``now``): where the
        answer said (this participant's place in the interval), else ``next_delay_s`` after ``due``."""
        if ok and self.told_due is not None:
            return max(self.told_due, now)
        delay = self.next_delay_s(ok)
        return due + delay if due + delay > now else now + delay

    def next_delay_s(self, ok: bool) -> float:
        """How long after a round the next one comes: the interval (after a change, a random half to one and a
        half of it), or, when the round failed, the backoff's next wait."""
        if not ok:
            return self.backoff.next_delay_s()
        if self.spread_next:
            self.spread_next = False
            return self.interval_s * (SPREAD_FROM + self.rng())
        return self.interval_s

    def _follow(self, interval_s: float) -> bool:
        if interval_s == self.interval_s or not (MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S):
            return False
        self.interval_s = interval_s
        self.spread_next = True
        retry_s = min(interval_s, self.configured_s)
        self.backoff = Backoff(retry_s, self._backoff_cap(retry_s), self.rng)
        return True
