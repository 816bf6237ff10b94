"""What the state views show of a participant's use of a shared limit: its admitted rate read from its counters.

The usage a participant reports for one interval swings with its sends' size (producers sending 8 at a time at 10
msgs/s each, reporting every 0.5 s, read 16 or 32), so the shared and resource-group views show what it admitted
over its last few seconds, from its counters (``controlplane.admitted``), where that can be read. Shares,
allocations and grants keep the reported usage.
"""

from __future__ import annotations

from typing import NamedTuple

from controlplane.admitted import admitted_per_s
from controlplane.state import LiveState
from controlplane.steps import STEP_ENTRIES, Steps
from protocol import UsageValues, parse_limit_key

__all__ = ["Shown", "shown_steps"]


class Shown(NamedTuple):
    """What a view shows of one participant's use of a shared limit (``UsageValues``' own names)."""

    usage_msgs_per_s: float
    usage_bytes_per_s: float
    demand_msgs_per_s: float
    demand_bytes_per_s: float


def shown_steps(live: LiveState, usage: dict[str, dict[str, UsageValues]]) -> Steps[dict[str, dict[str, Shown]]]:
    """``usage`` (limit key -> participant -> reported values) with each participant's usage replaced by what it
    admitted over its last few seconds, where its counters tell (``controlplane.admitted``), and its demand by
    that usage times the factor it reported (demand / usage: ``1 / (1 - paused)``, measured in time, not in sends;
    a participant that admitted nothing in its last interval keeps the demand it reported). Pauses every
    ``STEP_ENTRIES`` entries."""
    limiter = {key: parse_limit_key(key) for key in usage}   # (level, direction, name): a limiter's (level, kind, name)
    wanted: dict[str, list[tuple[str, str, str]]] = {}
    for key, users in usage.items():
        for pid in users:
            wanted.setdefault(pid, []).append(limiter[key])
    yield None
    read: dict[str, dict[tuple[str, str, str], tuple[float, float]]] = {}
    done = 0
    for pid, peer in live.snapshot().peers:
        if pid in wanted and peer.span is not None:
            read[pid] = admitted_per_s(peer.span, peer.report, wanted[pid])
            done += len(wanted[pid])
            if done >= STEP_ENTRIES:
                done = 0
                yield None
    out: dict[str, dict[str, Shown]] = {}
    for key, users in usage.items():
        out[key] = shown = {}
        for pid, u in users.items():
            rates = read.get(pid, {}).get(limiter[key])
            shown[pid] = Shown(u.usage_msgs_per_s, u.usage_bytes_per_s, u.demand_msgs_per_s, u.demand_bytes_per_s) \
                if rates is None else Shown(rates[0], rates[1],
                                            _demand(rates[0], u.usage_msgs_per_s, u.demand_msgs_per_s),
                                            _demand(rates[1], u.usage_bytes_per_s, u.demand_bytes_per_s))
        done += len(users)
        if done >= STEP_ENTRIES:
            done = 0
            yield None
    return out


def _demand(usage: float, reported_usage: float, reported_demand: float) -> float:
    if reported_usage <= 0:
        return max(reported_demand, usage)
    return max(usage, usage * reported_demand / reported_usage)
