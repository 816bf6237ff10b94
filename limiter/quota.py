"""Shared quotas (PIP-82 resource groups): how one configured limit is split between the participants using it.

Every participant (a Python worker, or the driver) reports its ``usage`` (what it sent in the last interval) and
its ``demand`` (what its producers tried to send, throttled attempts included) for each shared limit; all the
reports form a usage map; ``local_quotas`` turns the map into each participant's local quota, the rate of its
local bucket. The control plane and the participants call the same function, so they always agree.

Quotas and usages are plain numbers of one dimension (msgs or bytes per period); ``configured <= 0`` means
unlimited, as in ``policy.Rate``, and every such split answers ``UNLIMITED`` (-1).

Strategy "proportional" (Pulsar-compatible): ``compute_local_quota``
--------------------------------------------------------------------
Pulsar's ``ResourceQuotaCalculatorImpl``: ``quota = max(my + (configured - total) * my / total, floor)``, which is
just ``configured * my / total`` (computed so: Pulsar's form loses digits when total >> configured): every
participant keeps its current *fraction* of the total. Only the *sum* of ``all_usages`` is used, and mine is part
of it: ``all_usages`` may list every participant's usage, mine included, or -- the shape Pulsar's
``ResourceGroupService`` passes to ``ResourceQuotaCalculator.computeLocalQuota`` -- hold one element, the global
total (``compute_local_quota(100, 20, [40])`` is 50, as in Pulsar's ``ResourceQuotaCalculatorImplTest``). What is
required is what Pulsar requires: every value >= 0, and mine <= the total.
PIP-82's example, usages 10/50/30 against 100: quotas 11.11/55.56/33.33. Total usage 0 (start-up) gives every
participant the whole ``configured`` (n participants may briefly send n times the limit). The ``floor`` is
Pulsar's 1 (a quota of 0 would mean unlimited), but never above ``configured`` itself.
Its flaw: a split is a fixed point. Usages 70/30 against 100, both wanting 70: quotas 70/30, so usages stay
70/30, forever. Whoever was throttled first stays throttled.

Strategy "fair" (the default): ``allocate_fair``, max-min fair share by water-filling on demand
------------------------------------------------------------------------------------------------
Everyone first gets ``floor = min(min_share, capacity / n)``, so nobody's quota is ever 0 (the bucket must not
be starved if it starts sending, and 0 would read as unlimited). Above that, raise a water level ``W`` until
the capacity is used up: each participant gets ``min(max(demand, floor), W)``. Nobody gets more than it asks
while another wants more, and everyone who wants more gets the same, the largest, share. The 70/30 case:
demands 70/70 -> ``W = 50`` -> quotas 50/50 in one interval, whatever the usages were.
Three participants, capacity 100, demands a=10, b=50, c=80: a fits (3 * 10 <= 100), 90 left for two; b does not
(2 * 50 > 90), so ``W = 45``: quotas a=10, b=45, c=45 (sum 100).
Spare capacity (total demand below it) is shared out equally on top of every demand, so a participant whose
demand rises can use it at once instead of waiting an interval: demands 10/20/30 against 100 -> spare 40 ->
quotas 23.33/33.33/43.33. Spare exists only when every demand is met, so the rule above still holds, and the
sum is always the capacity: the quota is never left unused (a PIP-82 goal).
Demand must really include throttled attempts (a paused producer's wish, e.g. ``usage / (1 - throttled
fraction)``): reported as plain usage, 70/30 looks satisfied against 100 and fair keeps 70/30 like proportional.
``local_quotas`` uses ``max(demand, usage)``, since a participant wanted at least what it sent.

Exact sums
----------
Float rounding could push a sum a few ulps over the capacity, and the sum of floats depends on the order of
adding. So every fair quota is rounded *down* to a multiple of ``q = math.ulp(capacity)``: all partial sums of
such numbers up to the capacity are exact floats, so any sum of the quotas, in any order, is exact. If rounding
in the level left the exact sum above the capacity, ``W`` (or the spare share) is lowered by the excess, the
step doubling until it fits. The cost: at most a few ulps of the capacity per participant left unallocated
(45.0 stays 45.0); monotonicity in the capacity holds up to those ulps.

Report suppression: ``need_to_report``
--------------------------------------
A participant reports usage when msgs or bytes moved by more than ``tolerance_pct`` of the last reported value,
up or down (0 -> anything is a change; 0 -> 0 is not), or when ``rounds_since_report`` (rounds since the last
report sent) reached ``max_rounds``: everyone reports at least once every ``max_rounds`` intervals (PIP-82's
mandatory period). Default tolerance 5 % (Pulsar's, not the seed's 10 %): PIP-82 accepts ~10 % overall error,
and a 10 % dead band alone would use all of it; our 1 s reports are tiny, so tighter costs little. In "fair"
mode call it for the demand too. Unlike Pulsar, a drop to 0 is reported at once (Pulsar checks only current
values > 0, so a participant that stops is seen only at the mandatory report).

Who is still a participant (expiry, stale and out-of-order reports, goodbyes) is the control plane's to track
(``controlplane.state``): these functions take the usage of the live ones.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from enum import StrEnum
from typing import Any

from .checks import at_least_zero, finite, positive
from .policy import UNLIMITED, PolicyError

__all__ = [
    "compute_local_quota", "allocate_fair", "need_to_report", "local_quotas", "Strategy",
    "UNLIMITED", "DEFAULT_STRATEGY", "DEFAULT_MIN_SHARE", "DEFAULT_TOLERANCE_PCT", "DEFAULT_MAX_ROUNDS",
]

DEFAULT_MIN_SHARE = 1.0
DEFAULT_TOLERANCE_PCT = 5.0
DEFAULT_MAX_ROUNDS = 5


class Strategy(StrEnum):
    FAIR = "fair"
    PROPORTIONAL = "proportional"

    @classmethod
    def parse(cls, value: Any) -> Strategy:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"strategy must be one of {[s.value for s in cls]}, got {value!r}") from None


DEFAULT_STRATEGY = Strategy.FAIR


def _limit(name: str, value: Any) -> float:
    return finite(name, value, rule=" (> 0, or <= 0 e.g. -1 for unlimited)", error=PolicyError)


def _proportional(configured: float, my: float, total: float) -> float:
    if configured <= 0:
        return UNLIMITED
    if total == 0:
        return configured
    return max(configured * (my / total), min(1.0, configured))  # = Pulsar's expression, without cancellation


def compute_local_quota(configured: float, my_usage: float,
                        all_usages: Mapping[Any, float] | Iterable[float]) -> float:
    """Pulsar's proportional local quota. ``all_usages``: the usages whose sum is the total, mine included --
    every participant's (a mapping's values, or any iterable of numbers), or one element holding the global total
    (Pulsar's call). Returns ``UNLIMITED`` (-1) when ``configured <= 0``."""
    _limit("configured", configured)
    at_least_zero("my_usage", my_usage)
    values = list(all_usages.values() if isinstance(all_usages, Mapping) else all_usages)
    for v in values:
        at_least_zero("every usage in all_usages", v)
    total = math.fsum(values)
    if my_usage > total:
        raise ValueError(f"my_usage ({my_usage!r}) is part of the total, so it must be <= sum(all_usages) "
                         f"({total!r}); all_usages holds every participant's usage, mine included, or the global "
                         f"total as one element; got {values!r}")
    return _proportional(configured, my_usage, total)


def _shave(make, x: float, lowest: float, cap: float) -> list[float]:
    """Lower ``x`` (not below ``lowest``, where make(lowest) fits) until the values make(x) sum to <= cap."""
    vals, step = make(x), 0.0
    while x > lowest and (excess := math.fsum(vals) - cap) > 0:
        step = max(2 * step, excess, math.ulp(x))
        x = max(lowest, x - step)
        vals = make(x)
    return vals


def allocate_fair(capacity: float, demands: Mapping[Hashable, float], min_share: float = DEFAULT_MIN_SHARE) -> dict:
    """Max-min fair split of ``capacity`` by demand (see the module essay); keys in ``demands``' order.

    Every quota is > 0 and >= ``min(min_share, capacity / n)`` less ``ulp(capacity)``; any sum of them, in any
    order, is <= capacity (and equal up to a few ulps). ``capacity <= 0`` (unlimited) gives everyone ``UNLIMITED``."""
    _limit("capacity", capacity)
    positive("min_share", min_share, rule=" (a quota of 0 would mean unlimited)")
    if not isinstance(demands, Mapping):
        raise TypeError(f"demands must be a mapping participant -> demand, got {type(demands).__name__}")
    for p, d in demands.items():
        at_least_zero(f"demand of participant {p!r}", d)
    if capacity <= 0:
        return {p: UNLIMITED for p in demands}
    n = len(demands)
    if n == 0:
        return {}
    q = math.ulp(capacity)

    def grid(values: Iterable[float]) -> list[float]:  # multiples of q: every sum of them is exact
        return [math.floor(v / q) * q for v in values]

    floor = max(grid([min(min_share, capacity / n)])[0], q)
    while n * floor > capacity:
        floor -= q
    # a want above the capacity gets the capacity at most anyway; clamped, v / q stays finite in grid()
    wants = [min(max(d, floor), capacity) for d in demands.values()]
    if math.fsum(grid(wants)) <= capacity:  # every demand met: share the spare out equally on top
        vals = _shave(lambda b: grid(w + b for w in wants), (capacity - math.fsum(wants)) / n, 0.0, capacity)
    else:
        left, level = capacity, max(wants)
        for k, w in enumerate(sorted(wants)):
            if w * (n - k) >= left:
                level = left / (n - k)
                break
            left -= w
        vals = _shave(lambda lv: grid(min(w, lv) for w in wants), max(level, floor), floor, capacity)
    return dict(zip(demands, vals, strict=True))


def need_to_report(bytes: float, last_bytes: float, msgs: float, last_msgs: float,
                   tolerance_pct: float = DEFAULT_TOLERANCE_PCT, rounds_since_report: int = 0,
                   max_rounds: int = DEFAULT_MAX_ROUNDS) -> bool:
    """True if this round's usage must be reported (changed beyond tolerance, or the mandatory round is due)."""
    for name, v in (("bytes", bytes), ("last_bytes", last_bytes), ("msgs", msgs), ("last_msgs", last_msgs),
                    ("tolerance_pct", tolerance_pct)):
        at_least_zero(name, v)
    for name, v, low in (("rounds_since_report", rounds_since_report, 0), ("max_rounds", max_rounds, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    if rounds_since_report >= max_rounds:
        return True
    return any(abs(cur - last) * 100 > tolerance_pct * last if last else cur != 0
               for cur, last in ((bytes, last_bytes), (msgs, last_msgs)))


def local_quotas(strategy: Strategy | str, configured: float, usages: Mapping[Hashable, float],
                 demands: Mapping[Hashable, float] | None = None, *, min_share: float = DEFAULT_MIN_SHARE) -> dict:
    """Every participant's local quota under ``strategy``; ``demands`` defaults to ``usages`` (same keys)."""
    strategy = Strategy.parse(strategy)
    _limit("configured", configured)
    if not isinstance(usages, Mapping) or not (demands is None or isinstance(demands, Mapping)):
        raise TypeError("usages and demands must be mappings participant -> number")
    for p, u in usages.items():
        at_least_zero(f"usage of participant {p!r}", u)
    if demands is not None and demands.keys() != usages.keys():
        raise ValueError(f"demands and usages must name the same participants: only in usages "
                         f"{sorted(map(repr, usages.keys() - demands.keys()))}, only in demands "
                         f"{sorted(map(repr, demands.keys() - usages.keys()))}")
    if strategy is Strategy.PROPORTIONAL:
        total = math.fsum(usages.values())
        return {p: _proportional(configured, u, total) for p, u in usages.items()}
    if demands is None:
        return allocate_fair(configured, usages, min_share)
    for p, d in demands.items():
        at_least_zero(f"demand of participant {p!r}", d)
    return allocate_fair(configured, {p: max(demands[p], u) for p, u in usages.items()}, min_share)
