"""How late each participant's grant asks arrive: so that its spends are dated by its own clock, not by arrival.

How it works and why
--------------------
An ask says when its pool's tokens were spent as ``ago_s``, seconds before the ask was sent. Dated from when the
ask *arrived* (``now - ago_s``), every spend is counted late by the ask's time on the way: the keeper thread's wait
for the GIL after its round, the network, the control plane's queue. On a busy 2-core host most asks arrive within
a millisecond or two, but one in twenty took 20-75 ms, and a micro-batch's lump of 1,200-2,500 tokens reported by
such an ask was counted that much longer than it was spent: the spends' bound (``limiter.spent``) held the next
micro-batch back for as long, every time its lump slid out (a stream of 10,000 msgs/s read 0.985-0.988 of its limit
with no slack in that bound; 0.990 dated as below).

So an ask also says its participant's clock when it measured those ``ago_s`` (``GrantRequest.sent_s``; any origin:
only differences are read). For each participant ``AskLag`` keeps the least ``lag = now - sent_s`` of its recent
asks: its clock's offset from this one plus the quickest way over. An ask that arrived ``lag - least`` later than
that quickest one had its spends that much earlier than ``now - ago_s``, and they are dated so. The dates stay at or
after the spends (the least lag includes the quickest ask's own time on the way), and within ``MAX_EXCESS_S`` of
the arrival dating: a participant's word moves its own spends by no more than that.

The least is over two epochs of ``EPOCH_S`` (the current and the one before), so a clock that drifts from this one
(100 ppm is 2 ms over 20 s) is read afresh, and a participant gone for two epochs is forgotten.

Each ask's delay (``lag - least``) is also counted in buckets (``delays``): the control plane exports them as
``throttlescope_grant_ask_delay_seconds``. Spends are dated right whatever the delay, but an answer that late reaches
its pool that late too; a busy host or control plane shows there first.

Worked example: a participant's asks arrive with ``lag`` 1,000.0012 s (its clock started 1,000 s after ours, 1.2 ms
on the way), then one with a spend of 2,500 tokens ``ago_s`` 0.001 arrives with ``lag`` 1,000.0412 s: that ask was
40 ms on its way, and the spend is dated ``now - 0.001 - 0.040``, not ``now - 0.001``.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading

__all__ = ["AskLag", "EPOCH_S", "MAX_EXCESS_S", "ASK_DELAY_BUCKETS", "MOST_DELAY_SUMMED_S"]

EPOCH_S = 10.0
# the most an ask's spends are dated before its arrival dating: an ask unanswered for longer is an outage to its
# participant (``collectors.grants.ASK_TIMEOUT_S``)
MAX_EXCESS_S = 0.5
ASK_DELAY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)   # seconds
# the most one ask adds to the delays' sum: a participant whose clock was far off once (a bug) is slow by that much
# at every ask for two epochs, and must not swamp the sum; its asks still count in the +Inf bucket
MOST_DELAY_SUMMED_S = 10.0


class AskLag:
    """The least lag of each participant's recent asks (see the module essay). Thread-safe."""

    def __init__(self, epoch_s: float = EPOCH_S, max_excess_s: float = MAX_EXCESS_S):
        if not (0 < epoch_s < math.inf and 0 <= max_excess_s < math.inf):
            raise ValueError(f"epoch_s must be > 0 and max_excess_s >= 0 (finite seconds), got {epoch_s!r} and "
                             f"{max_excess_s!r}")
        self.epoch_s, self.max_excess_s = float(epoch_s), float(max_excess_s)
        self._current: dict[str, float] = {}
        self._previous: dict[str, float] = {}
        self._epoch_from = -math.inf
        self._lock = threading.Lock()
        self._bucket_counts = [0] * (len(ASK_DELAY_BUCKETS) + 1)   # per bucket of ASK_DELAY_BUCKETS, then +Inf
        self._delay_sum = 0.0

    def excess_s(self, participant_id: str, sent_s: float | None, now: float) -> float:
        """Seconds this ask (sent at ``sent_s`` by its participant's clock, arrived at ``now`` by ours) took beyond
        the quickest of that participant's recent asks: how much earlier its spends were than ``now - ago_s``.
        0 when the ask does not say when it was sent."""
        if sent_s is None:
            return 0.0
        lag = now - sent_s
        with self._lock:
            if now - self._epoch_from >= self.epoch_s:
                self._previous, self._current, self._epoch_from = self._current, {}, now
            least = min(lag, self._current.get(participant_id, math.inf))
            self._current[participant_id] = least
            least = min(least, self._previous.get(participant_id, math.inf))
            delay = lag - least
            self._bucket_counts[bisect.bisect_left(ASK_DELAY_BUCKETS, delay)] += 1
            self._delay_sum += min(delay, MOST_DELAY_SUMMED_S)
        return min(self.max_excess_s, delay)

    def delays(self) -> tuple[list[tuple[float, int]], float]:
        """Every ask's delay so far (see ``excess_s``; capped in the sum only, at ``MOST_DELAY_SUMMED_S``):
        ``([(upper bound, asks at or under it), ...], sum of the delays)``, cumulative as a Prometheus histogram's
        buckets, the last bound ``inf``."""
        with self._lock:
            counts, total = list(self._bucket_counts), self._delay_sum
        return list(zip((*ASK_DELAY_BUCKETS, math.inf), itertools.accumulate(counts), strict=True)), total

    def __len__(self) -> int:
        """Participants it keeps a lag of."""
        with self._lock:
            return len(self._current.keys() | self._previous.keys())
