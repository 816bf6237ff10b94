"""Pure transforms of ``/v1/state/shared`` (a ``SharedState``) into the rows of the overview's shared-limits
section.

How and why
-----------
A shared limit (a tenant, a topic spanning many Spark workers, a resource group) is handed out by the control
plane in grants; each participant reports what it wants (demand) and what it admitted (usage). The operator's
two questions are answered per limit from the same document:

- *over-admission*: the participants together admitted more than the limit (``utilisation`` above 1 by more than
  ``TOLERANCE``);
- *stranded quota*: part of the limit goes unused while demand goes unmet -- ``min(limit - admitted, demand -
  admitted)``, when it is more than ``TOLERANCE`` of the limit. Per participant, ``unused share`` (its fair rate
  beyond what it admits) and ``held back`` (what it wants beyond what it admits) show who holds the quota and
  who waits for it.

The limit is shown in the dimension it is set in: messages, unless only bytes are limited. A value that is not
limited reads "unlimited" (``derive.limit_value``); a share nobody asked a grant for reads "no grant".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboard.derive import UNLIMITED, label, limit_text, limit_value
from protocol.state import PerSecond, SharedLimit, SharedParticipant, SharedState

__all__ = ["TOLERANCE", "NO_GRANT", "dimension", "status", "summary_rows", "summary_tables", "participant_rows",
           "ordered", "chart"]

TOLERANCE = 0.05
NO_GRANT = "no grant"
_UNIT = {"msgs": "msgs/s", "bytes": "B/s"}


@dataclass(frozen=True)
class _Use:
    """What the participants of a limit together, or one of them, admit, want and were granted in one dimension
    (a limit and a participant name these fields alike)."""

    usage: float
    demand: float
    granted: PerSecond | None     # tokens granted in the last window (None: nobody asked)


def _use(of: SharedLimit | SharedParticipant, dim: str) -> _Use:
    if dim == "msgs":
        return _Use(of.usageMsgsPerSecond, of.demandMsgsPerSecond, of.grantedMsgsInWindow)
    return _Use(of.usageBytesPerSecond, of.demandBytesPerSecond, of.grantedBytesInWindow)


def _cap(limit: SharedLimit, dim: str) -> float | str:
    """The limit per second in ``dim``, or "unlimited"."""
    return limit_value(limit.limitMsgsPerSecond if dim == "msgs" else limit.limitBytesPerSecond)


def dimension(limit: SharedLimit) -> str:
    """"msgs", or "bytes" when only bytes are limited."""
    return "bytes" if _cap(limit, "msgs") == UNLIMITED and _cap(limit, "bytes") != UNLIMITED else "msgs"


def status(limit: SharedLimit) -> tuple[str, float]:
    """(what stands out, how much per second): "over the limit", "stranded", "ok" or "unlimited"."""
    dim = dimension(limit)
    cap, use = _cap(limit, dim), _use(limit, dim)
    if isinstance(cap, str):
        return UNLIMITED, 0.0
    if use.usage > cap * (1 + TOLERANCE):
        return "over the limit", use.usage - cap
    stranded = min(cap - use.usage, use.demand - use.usage)
    if stranded > cap * TOLERANCE:
        return "stranded", stranded
    return "ok", 0.0


def _status_text(limit: SharedLimit) -> str:
    what, amount = status(limit)
    unit = _UNIT[dimension(limit)]
    if what == "over the limit":
        return f"over the limit by {limit_text(round(amount, 1), unit, False)}"
    if what == "stranded":
        return f"stranded: {limit_text(round(amount, 1), unit, False)} unused while demand waits"
    return what


def ordered(doc: SharedState) -> list[SharedLimit]:
    """The limits that need a look first: over the limit, then stranded quota, then by utilisation; unlimited
    ones last."""
    rank = {"over the limit": 0, "stranded": 1, "ok": 2, UNLIMITED: 3}

    def key(limit: SharedLimit) -> tuple[int, float]:
        dim = dimension(limit)
        cap = _cap(limit, dim)
        return rank[status(limit)[0]], -(0.0 if isinstance(cap, str) else _use(limit, dim).usage / cap)
    return sorted(doc.limits, key=key)


def _name(limit: SharedLimit) -> str:
    return label(limit.level, limit.name, limit.direction)


def chart(limit: SharedLimit) -> tuple[str, float | str, str]:
    """(its name, the limit per second or "unlimited", the unit) for one limit's chart."""
    dim = dimension(limit)
    return _name(limit), _cap(limit, dim), _UNIT[dim]


def _summary_row(limit: SharedLimit) -> dict[str, Any]:
    dim = dimension(limit)
    cap, use, unit = _cap(limit, dim), _use(limit, dim), _UNIT[dim]
    granted, window = use.granted, limit.windowSeconds
    return {"shared limit": _name(limit), f"limit {unit}": cap, f"admitted {unit}": round(use.usage, 2),
            f"demand {unit}": round(use.demand, 2),
            f"granted {unit}": (UNLIMITED if isinstance(cap, str) else round(granted / window, 2)
                                if isinstance(granted, int | float) and window else NO_GRANT),
            "use %": UNLIMITED if isinstance(cap, str) else round(100 * use.usage / cap, 1),
            "participants": len(limit.participants) if limit.participantCount is None else limit.participantCount,
            "adaptive": adaptive_text(limit),
            "status": _status_text(limit)}


def summary_rows(doc: SharedState) -> list[dict[str, Any]]:
    """One row per shared limit, the ones that need a look first."""
    return [_summary_row(limit) for limit in ordered(doc)]


def summary_tables(doc: SharedState) -> dict[str, list[dict[str, Any]]]:
    """``summary_rows`` split by unit ("msgs/s", then "B/s" for limits set in bytes only), each in its order: one
    table's columns are one unit's (in one table, a bytes limit's row left the msgs columns empty: "None")."""
    tables: dict[str, list[dict[str, Any]]] = {unit: [] for unit in _UNIT.values()}
    for limit in ordered(doc):
        tables[_UNIT[dimension(limit)]].append(_summary_row(limit))
    return {unit: rows for unit, rows in tables.items() if rows}


def adaptive_text(limit: SharedLimit) -> str:
    """An adaptive limit's rate learnt against its ceiling, what moved it last and any pause the sink asked for;
    "off" for one that does not adapt."""
    a = limit.adaptive
    if a is None:
        return "off"
    text = f"{a.ratePerSecond:,.0f} of {a.ceilingPerSecond:,.0f}/s ({a.changedBy})"
    return text + (f", paused {a.pausedForSeconds:.1f} s" if a.pausedForSeconds > 0 else "")


def _share(value: PerSecond | None) -> float | str:
    return NO_GRANT if value is None else limit_value(value, zero_is_unlimited=False)


def participant_rows(limit: SharedLimit) -> list[dict[str, Any]]:
    """One row per participant of one limit: demand, usage, share (fair rate), granted in the window."""
    dim = dimension(limit)
    unit = _UNIT[dim]
    rows = []
    for p in limit.participants:
        use = _use(p, dim)
        share = _share(p.shareMsgsPerSecond if dim == "msgs" else p.shareBytesPerSecond)
        granted = _share(use.granted)
        rows.append({"participant": p.participantId, f"demand {unit}": round(use.demand, 2),
                     f"usage {unit}": round(use.usage, 2),
                     f"share {unit}": share if isinstance(share, str) else round(share, 2),
                     "granted in window": granted if isinstance(granted, str) else round(granted, 2),
                     f"unused share {unit}": round(max(0.0, share - use.usage), 2) if not isinstance(share, str)
                     else "",
                     f"held back {unit}": round(max(0.0, use.demand - use.usage), 2)})
    return rows
