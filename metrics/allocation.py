"""Each participant's allocation of a shared limit, as the operator sees it (``/v1/state/resourcegroups``) and
Prometheus does (``throttlescope_resource_group_calculated_quota``): one computation for both.

How it works and why
--------------------
Shared limits are handed out as token grants: the control plane's grant book (``controlplane.grants.GrantBook``)
paces every participant that asks at its max-min fair rate of the limit, by the rates the askers want. That rate
is what a participant may spend, so it is its allocation: ``GrantBook.shares`` reads it (``fairPerSecond``)
without changing the windows.

PIP-82's usage-based split (``limiter.quota.local_quotas``, with the group's strategy) is what participants
computed before grants. It is kept only for participants not under grants -- that did not ask for this limit in
its grant window: a participant without a grant keeper, one that reported usage before its first ask, and
everyone right after a control-plane restart, when the book's windows are empty. Their usage map is then the
only account of their share. They split what the grant holders' fair rates leave of the limit, so the
allocations never add up to more than the limit while the book holds it; with nobody under grants that is the
whole limit, PIP-82 as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from limiter.quota import local_quotas
from protocol import PolicySet, UsageValues

__all__ = ["ShareSource", "allocations", "shares"]


class ShareSource(Protocol):
    def shares(self, holders: dict[str, Iterable[str]], policies: PolicySet) -> dict[str, dict[str, Any]]:
        """``controlplane.grants.GrantBook.shares``: per limit key, per participant looked up and dimension, its
        ``fairPerSecond`` (0: it did not ask in the window; None: unlimited, or no window)."""

    def ask_pace(self) -> dict[str, float]:
        """``controlplane.grants.GrantBook.ask_pace``: ``busyLimits``, ``asksPerLimitPerSecond``,
        ``budgetPerSecond``."""

    def ask_delays(self) -> tuple[list[tuple[float, int]], float]:
        """``controlplane.grants.GrantBook.ask_delays``: the grant asks' delays as cumulative buckets
        ``[(upper bound, asks), ...]`` (the last bound ``inf``) and their sum, in seconds."""


def shares(source: ShareSource | None, users: Mapping[str, Mapping[str, UsageValues]],
           policies: PolicySet) -> dict[str, dict[str, Any]]:
    """What ``source`` grants the ``users`` of each limit key (nothing without a source: PIP-82 throughout)."""
    if source is None:
        return {}
    return source.shares({key: list(people) for key, people in users.items()}, policies)


def allocations(configured: float, strategy: str, users: Mapping[str, UsageValues], dim: str,
                granted: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Each of ``users``' allocation of dimension ``dim`` ("msgs" or "bytes") of one shared limit of
    ``configured`` per second (<= 0: unlimited, -1 each): its fair rate from ``granted`` (the limit's entry of
    ``shares``) when it asked in the grant window, otherwise PIP-82's split of what the others' fair rates leave
    (see the module essay)."""
    if not users:
        return {}
    holders = (granted or {}).get("holders", {})
    fair = {p: rate for p in users if (rate := ((holders.get(p) or {}).get(dim) or {}).get("fairPerSecond"))}
    if configured <= 0 or not fair:
        fair = {}
    rest = [p for p in users if p not in fair]
    out = dict(fair)
    if rest:
        left = configured - math.fsum(fair.values()) if fair else configured
        if fair and left <= 0:   # (local_quotas would read a limit of 0 as unlimited)
            out.update(dict.fromkeys(rest, 0.0))
        else:
            out.update(local_quotas(strategy, left, {p: getattr(users[p], f"usage_{dim}_per_s") for p in rest},
                                    {p: getattr(users[p], f"demand_{dim}_per_s") for p in rest}))
    return {p: out[p] for p in users}
