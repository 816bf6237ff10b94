"""Pure transforms of ``/v1/state/shared`` into the rows of the overview's shared-limits section.

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

from typing import Any

from dashboard.derive import UNLIMITED, label, limit_text, limit_value

__all__ = ["TOLERANCE", "NO_GRANT", "dimension", "status", "summary_rows", "participant_rows", "ordered", "chart"]

TOLERANCE = 0.05
NO_GRANT = "no grant"
_WORD = {"msgs": "Msgs", "bytes": "Bytes"}
_UNIT = {"msgs": "msgs/s", "bytes": "B/s"}


def dimension(limit: dict[str, Any]) -> str:
    """"msgs", or "bytes" when only bytes are limited."""
    msgs, byts = limit.get("limitMsgsPerSecond"), limit.get("limitBytesPerSecond")
    return "bytes" if limit_value(msgs) == UNLIMITED and limit_value(byts) != UNLIMITED else "msgs"


def _get(limit: dict[str, Any], what: str, dim: str) -> Any:
    return limit.get(f"{what}{_WORD[dim]}PerSecond")


def status(limit: dict[str, Any]) -> tuple[str, float]:
    """(what stands out, how much per second): "over the limit", "stranded", "ok" or "unlimited"."""
    dim = dimension(limit)
    cap = limit_value(_get(limit, "limit", dim))
    if cap == UNLIMITED:
        return UNLIMITED, 0.0
    used, wanted = float(_get(limit, "usage", dim) or 0.0), float(_get(limit, "demand", dim) or 0.0)
    if used > cap * (1 + TOLERANCE):
        return "over the limit", used - cap
    stranded = min(cap - used, wanted - used)
    if stranded > cap * TOLERANCE:
        return "stranded", stranded
    return "ok", 0.0


def _status_text(limit: dict[str, Any]) -> str:
    what, amount = status(limit)
    unit = _UNIT[dimension(limit)]
    if what == "over the limit":
        return f"over the limit by {limit_text(round(amount, 1), unit, False)}"
    if what == "stranded":
        return f"stranded: {limit_text(round(amount, 1), unit, False)} unused while demand waits"
    return what


def ordered(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The limits that need a look first: over the limit, then stranded quota, then by utilisation; unlimited
    ones last."""
    rank = {"over the limit": 0, "stranded": 1, "ok": 2, UNLIMITED: 3}

    def key(limit: dict[str, Any]) -> tuple[int, float]:
        cap = limit_value(_get(limit, "limit", dimension(limit)))
        use = 0.0 if cap == UNLIMITED else float(_get(limit, "usage", dimension(limit)) or 0.0) / cap
        return rank[status(limit)[0]], -use
    return sorted(doc.get("limits", []), key=key)


def _name(limit: dict[str, Any]) -> str:
    return label({"level": limit["level"], "name": limit["name"], "kind": limit["direction"]})


def chart(limit: dict[str, Any]) -> tuple[str, float | str, str]:
    """(its name, the limit per second or "unlimited", the unit) for one limit's chart."""
    dim = dimension(limit)
    return _name(limit), limit_value(_get(limit, "limit", dim)), _UNIT[dim]


def summary_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per shared limit, the ones that need a look first."""
    rows = []
    for limit in ordered(doc):
        dim = dimension(limit)
        unit = _UNIT[dim]
        cap = limit_value(_get(limit, "limit", dim))
        used = float(_get(limit, "usage", dim) or 0.0)
        granted, window = limit.get(f"granted{_WORD[dim]}InWindow"), limit.get("windowSeconds")
        rows.append({"shared limit": _name(limit), f"limit {unit}": cap, f"admitted {unit}": round(used, 2),
                     f"demand {unit}": round(float(_get(limit, "demand", dim) or 0.0), 2),
                     f"granted {unit}": (UNLIMITED if cap == UNLIMITED else round(float(granted) / float(window), 2)
                                         if isinstance(granted, int | float) and window else NO_GRANT),
                     "use %": UNLIMITED if cap == UNLIMITED else round(100 * used / cap, 1),
                     "participants": len(limit.get("participants", [])), "status": _status_text(limit)})
    return rows


def _share(value: Any) -> float | str:
    return NO_GRANT if value is None else limit_value(value, zero_is_unlimited=False)


def participant_rows(limit: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per participant of one limit: demand, usage, share (fair rate), granted in the window."""
    dim = dimension(limit)
    unit, word = _UNIT[dim], _WORD[dim]
    rows = []
    for p in limit.get("participants", []):
        used, wanted = float(p[f"usage{word}PerSecond"]), float(p[f"demand{word}PerSecond"])
        share = _share(p.get(f"share{word}PerSecond"))
        granted = _share(p.get(f"granted{word}InWindow"))
        rows.append({"participant": p["participantId"], f"demand {unit}": round(wanted, 2),
                     f"usage {unit}": round(used, 2),
                     f"share {unit}": share if isinstance(share, str) else round(share, 2),
                     "granted in window": granted if isinstance(granted, str) else round(granted, 2),
                     f"unused share {unit}": round(max(0.0, share - used), 2) if not isinstance(share, str) else "",
                     f"held back {unit}": round(max(0.0, wanted - used), 2)})
    return rows
