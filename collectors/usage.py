"""What a participant reports of each shared limit: usage and demand per round, and which of them to send.

Demand
------
The limiters count what they admitted, not what producers wanted: a paused producer does not try. But a
limiter knows how long its producers waited in its queue (``throttle_time_s``, producer-seconds, including the
wait in progress), and PublishLimits how many producers are bound to it. Over a round of Δt with n producers,
``paused = Δthrottle_time / (n * Δt)`` is the fraction of time they were held by *this* level, and a producer
sends at its wanted pace while it runs, so ``demand = usage / max(0.05, 1 - paused)``: a participant admitted
300/s while paused 57 % of the time wanted about 700/s. (Pauses by *other* levels do not count: the demand at a
level is what would pass it if it did not limit.) Two corrections: a participant paused for at least half the
round asks for at least twice its current local rate -- PIP-82's "steal" step, which also lifts one that was
starved outright (usage 0, paused throughout) -- and the 0.05 floor bounds one round's estimate to 20 x usage.
For dispatch, a read sent into backoff counts as ``backoff_s`` of pause for one dispatcher.

What it cannot see, and why that is acceptable: a blocked ``acquire`` holds one send, not a backlog, so a
producer throttled on every send (it sends the moment it is released and is paused again at once) shows only
"paused nearly always"; its pace is unobservable and the estimate is the steal step or the 20 x cap. Between
throttles a producer runs in short bursts, so ``usage / running time`` counts n sends over n - 1 gaps and leans
high. Both errors point the same way -- a throttled participant asks for *more* than it has -- which is what
the fair split needs to move; an over-ask is corrected the next round, when the participant, no longer held,
reports its usage as its demand (and max-min fairness caps every ask at the water level anyway). Several
producers on one limiter share one estimate (their average pause). A cheap attempted-send counter would not help:
a paused producer does not attempt.

Suppression (PIP-82)
--------------------
Per shared limit, usage and demand are sent when either moved by more than the tolerance (5 %) since they were
last sent (``limiter.quota.need_to_report``, called for usage and for demand), or when the limit was left out for
``max_rounds - 1`` rounds in a row (the mandatory report every ``max_rounds``), or when a full report is forced.
Otherwise its key goes in ``usage_unchanged`` and the control plane keeps the values it holds. A full report is
forced after any failed or refused round (a restarted control plane has to re-learn usage), and for a key whose
answer's map lacks this participant (the control plane held nothing for it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from limiter.policy import Rate
from limiter.quota import need_to_report
from protocol import UsageValues

__all__ = ["Suppression", "UsageMeter", "estimate_demand", "demand_factor", "MIN_RUNNING_FRACTION", "STEAL_PAUSED"]

MIN_RUNNING_FRACTION = 0.05   # demand <= 20 x usage in one round
STEAL_PAUSED = 0.5            # paused at least this long: ask for at least twice the current local rate


def demand_factor(paused_fraction: float) -> float:
    """demand / usage for producers held ``paused_fraction`` of the time: 1 / max(0.05, 1 - paused)."""
    return 1.0 / max(MIN_RUNNING_FRACTION, 1.0 - min(1.0, max(0.0, paused_fraction)))


def estimate_demand(usage: float, paused_fraction: float, local_rate_per_s: float = math.inf) -> float:
    """What producers wanted per second, from what they got (``usage``) and how long they were held (see the
    module essay): ``usage / max(0.05, 1 - paused)``, and at least twice the local rate when mostly paused."""
    demand = usage * demand_factor(paused_fraction)
    if paused_fraction >= STEAL_PAUSED and math.isfinite(local_rate_per_s):
        demand = max(demand, 2.0 * local_rate_per_s)
    return demand


@dataclass(slots=True)
class _Baseline:
    t: float
    msgs: float
    bytes: float
    paused_s: float


class UsageMeter:
    """Cumulative counters -> per-round rates (usage and demand) per limit key."""

    def __init__(self) -> None:
        self._base: dict[str, _Baseline] = {}

    def measure(self, key: str, now_s: float, admitted_msgs: float, admitted_bytes: float, paused_s: float,
                holders: int, rate: Rate, since_s: float) -> UsageValues:
        """Cumulative counters in (``paused_s``: holder-seconds paused); ``since_s``: start of the window for a
        key seen for the first time. Usage and demand per second over the window out."""
        base = self._base.get(key) or _Baseline(min(since_s, now_s), 0.0, 0.0, 0.0)
        self._base[key] = _Baseline(now_s, admitted_msgs, admitted_bytes, paused_s)
        dt = now_s - base.t
        if dt <= 1e-3:
            return UsageValues()
        um = max(0.0, admitted_msgs - base.msgs) / dt
        ub = max(0.0, admitted_bytes - base.bytes) / dt
        paused = max(0.0, paused_s - base.paused_s) / (dt * max(1, holders))
        return UsageValues(usage_msgs_per_s=um, usage_bytes_per_s=ub,
                                demand_msgs_per_s=estimate_demand(um, paused, rate.msgs_per_s()),
                                demand_bytes_per_s=estimate_demand(ub, paused, rate.bytes_per_s()))

    def forget(self, keep: Iterable[str]) -> None:
        keep = set(keep)
        for key in [k for k in self._base if k not in keep]:
            del self._base[key]


def _values(v: UsageValues) -> tuple[float, float, float, float]:
    return v.usage_msgs_per_s, v.usage_bytes_per_s, v.demand_msgs_per_s, v.demand_bytes_per_s


class Suppression:
    """PIP-82 report suppression per shared limit (see the module essay)."""

    def __init__(self, tolerance_pct: float, max_rounds: int):
        self.tolerance_pct, self.max_rounds = tolerance_pct, max_rounds
        self._last: dict[str, tuple[float, float, float, float]] = {}
        self._rounds: dict[str, int] = {}
        self._force_all = True
        self._force: set[str] = set()

    def force(self, keys: Iterable[str] | None = None) -> None:
        """Send these keys (None: every key) in full next round."""
        if keys is None:
            self._force_all = True
        else:
            self._force.update(keys)

    def plan(self, measured: dict[str, UsageValues]) -> tuple[dict[str, UsageValues], list[str]]:
        """(entries to send, keys to report as unchanged) for this round. Nothing changes until ``commit``."""
        send, unchanged = {}, []
        for key, values in measured.items():
            last = self._last.get(key)
            um, ub, dm, db = _values(values)
            rounds = self._rounds.get(key, 0) + 1
            if (self._force_all or key in self._force or last is None
                    or need_to_report(ub, last[1], um, last[0], self.tolerance_pct, rounds, self.max_rounds)
                    or need_to_report(db, last[3], dm, last[2], self.tolerance_pct)):
                send[key] = values
            else:
                unchanged.append(key)
        return send, unchanged

    def commit(self, sent: dict[str, UsageValues], unchanged: list[str]) -> None:
        """The round was delivered and accepted."""
        for key, values in sent.items():
            self._last[key] = _values(values)
            self._rounds[key] = 0
        for key in unchanged:
            self._rounds[key] = self._rounds.get(key, 0) + 1
        for key in [k for k in self._last if k not in sent and k not in unchanged]:
            del self._last[key]
            self._rounds.pop(key, None)
        self._force_all = False
        self._force.difference_update(sent)
