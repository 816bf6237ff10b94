"""Pure transforms from control-plane documents (plain dicts) to the rows and numbers the pages show.

How and why
-----------
No Streamlit, no HTTP: every function takes the JSON the state endpoints return (``/v1/state/*``,
``/v1/policies``, ``/admin/v2/audit``) and returns lists of dicts or numbers, so the pages stay thin and these
rules are unit-tested on plain data. Rates come from the history the control plane derives from counter deltas
(one point per report interval, summed over participants), each taken over a span of several reports by
``data.history`` (``rates``); a bucket's limit per second is its refill ``rate``
divided by its ``period_s``, summed over the participants that hold a share of it.

Fairness: a producer's share is its part of the admitted throughput under a common limit, and Jain's index
``(sum x)^2 / (n * sum x^2)`` says how even the shares are (1 = equal, 1/n = one takes everything).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from protocol import resource_group_for, split_topic

__all__ = ["UNLIMITED", "limit_value", "limit_text", "ago", "freshness", "label", "latest", "mean", "top_throttled", "limits_per_s", "admitted_vs_limit",
           "bucket_rows", "queue_rows", "jain", "parents", "child_shares", "rg_rows", "offload_rows",
           "offload_sample", "offload_points",
           "mutation_rows", "check_limit", "LIMIT_RULE", "diff_rows", "change_text", "applied", "audit_rows",
           "is_empty"]

LIMIT_RULE = "a finite number >= 0, or -1 for unlimited (0 also means no limit)"
UNLIMITED = "unlimited"
LIMIT_FIELD = re.compile(r"Rate(In|Per)|Max\w*Rate$|PermitsPerSecond$|^quotaPerSecond$")  # a policy's limit fields
Key = tuple[str, str, str]


def limit_value(value: Any, zero_is_unlimited: bool = True) -> float | str:
    """A limit as the pages show it: the number, or "unlimited" for no value, any negative (-1), infinity, and 0
    where it means no limit (a policy's, a bucket's rate; not a share worked out of a limit, where 0 is 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0 \
            or (value == 0 and zero_is_unlimited):
        return UNLIMITED
    return value


def limit_text(value: Any, unit: str = "", zero_is_unlimited: bool = True) -> str:
    """``limit_value`` as text: "40 msgs/s", "300,000 B/s", "unlimited"."""
    v = limit_value(value, zero_is_unlimited)
    if isinstance(v, str):
        return v
    text = f"{v:,.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.4g}"
    return f"{text} {unit}" if unit else text


def ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def freshness(doc: dict[str, Any], now: float) -> tuple[float | None, bool, str]:
    """(age of the newest report, stale?, "updated 2 s ago"); stale past 3 report intervals."""
    seen = [p["lastSeen"] for p in doc.get("participants", []) + doc.get("departed", []) if "lastSeen" in p]
    if not seen:
        return None, False, "no report yet"
    age = max(0.0, now - max(seen))
    return age, age > 3 * float(doc.get("reportIntervalSeconds", 1.0)), f"updated {ago(age)}"


def label(s: dict[str, Any]) -> str:
    kind = "" if s.get("kind", "publish") == "publish" else f" ({s['kind']})"
    level = str(s.get("level", "")).replace("_", " ")
    return f"{level} {s.get('name', '')}{kind}"


def latest(points: list[dict[str, Any]], field: str) -> float | None:
    for p in reversed(points):
        if p.get(field) is not None:
            return float(p[field])
    return None


def mean(points: list[dict[str, Any]], field: str, last_s: float | None = None) -> float | None:
    if last_s is not None and points:
        horizon = points[-1]["t"] - last_s
        points = [p for p in points if p["t"] > horizon]
    values = [float(p[field]) for p in points if p.get(field) is not None]
    return math.fsum(values) / len(values) if values else None


def top_throttled(history: dict[str, Any], n: int = 10) -> list[dict[str, Any]]:
    """The limiters that held producers longest over the window, most first (throttle seconds per second)."""
    interval = float(history.get("intervalSeconds", 1.0))
    rows = []
    for s in history.get("series", []):
        pts = s["points"]
        held = mean(pts, "throttleSecondsPerSecond") or 0.0
        count = math.fsum(float(p["throttledPerSecond"]) * interval for p in pts if p.get("throttledPerSecond"))
        if held > 0 or count > 0:
            rows.append({"target": label(s), "level": s["level"], "name": s["name"], "kind": s["kind"],
                         "throttle s/s": round(held, 3), "throttled": round(count),
                         "admitted msgs/s": round(latest(pts, "admittedMsgsPerSecond") or 0.0, 1)})
    rows.sort(key=lambda r: (-r["throttle s/s"], -r["throttled"], r["target"]))
    return rows[:n]


def limits_per_s(buckets: dict[str, Any]) -> dict[Key, dict[str, float | None]]:
    """Per limiter, its limit per second in msgs and bytes (None = unlimited), summed over participants."""
    out: dict[Key, dict[str, float | None]] = {}
    for b in buckets.get("buckets", []):
        entry = out.setdefault((b["level"], b["kind"], b["name"]), {"msgs": None, "bytes": None})
        for dim in ("msgs", "bytes"):
            snap = b.get(dim)
            if snap and snap.get("rate", 0) > 0:
                entry[dim] = (entry[dim] or 0.0) + snap["rate"] / snap.get("period_s", 1.0)
    return out


def admitted_vs_limit(history: dict[str, Any], buckets: dict[str, Any], last_s: float = 10.0) -> list[dict[str, Any]]:
    limits = limits_per_s(buckets)
    rows = []
    for s in history.get("series", []):
        limit = limits.get((s["level"], s["kind"], s["name"]), {}).get("msgs")
        if limit is None:
            continue
        admitted = mean(s["points"], "admittedMsgsPerSecond", last_s) or 0.0
        rows.append({"target": label(s), "admitted msgs/s": round(admitted, 2), "limit msgs/s": round(limit, 2),
                     "use %": round(100 * admitted / limit, 1) if limit else None})
    return rows


def bucket_rows(buckets: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for t in buckets.get("totals", []):
        m, b = t.get("msgs") or {}, t.get("bytes") or {}
        rows.append({"level": t["level"], "kind": t["kind"], "name": t["name"], "participants": t["participants"],
                     "msgs tokens": round(m.get("tokens", 0.0), 2), "msgs limit": limit_value(m.get("rate")),
                     "bytes tokens": round(b.get("tokens", 0.0), 1), "bytes limit": limit_value(b.get("rate")),
                     "in debt": m.get("tokens", 0.0) < 0 or b.get("tokens", 0.0) < 0})
    return rows


def queue_rows(queues: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per waiting producer, head of each queue first (position 1 resumes next)."""
    return [{"queue": f"{q['level'].replace('_', ' ')} {q['name']}", "participant": q["participantId"],
             "position": i + 1, "producer": e["producer"], "waiting s": round(e["waiting_s"], 3),
             "queue length": q["length"]}
            for q in queues.get("queues", []) for i, e in enumerate(q.get("entries", []))]


def jain(values: Iterable[float]) -> float | None:
    xs = [max(0.0, float(v)) for v in values]
    total, squares = math.fsum(xs), math.fsum(x * x for x in xs)
    return None if not xs or squares == 0 else total * total / (len(xs) * squares)


def _topic_parents(topic: str, groups: dict[str, str]) -> list[tuple[str, str]]:
    """The shared limits above ``topic``: its tenant, its namespace, and the resource group that applies to it
    (the topic's own, else its namespace's, else its tenant's: ``protocol.resource_group_for``)."""
    try:
        tenant, namespace, _ = split_topic(topic)
        found = resource_group_for(topic, lambda level, name: groups.get(name))
    except ValueError:   # not tenant/namespace/topic: nothing above it
        return []
    return [("tenant", tenant), ("namespace", namespace)] + ([("resource_group", found[0])] if found else [])


def _groups(rgs: dict[str, Any] | None) -> dict[str, str]:
    """Attached tenant, namespace or topic -> its resource group (their names never collide: 0, 1, 2 slashes)."""
    out: dict[str, str] = {}
    for g in (rgs or {}).get("resourceGroups", []):
        for target in (*g.get("tenants", []), *g.get("namespaces", []), *g.get("topics", [])):
            out[target] = g["name"]
    return out


def parents(history: dict[str, Any], rgs: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Limits shared by two or more topics: (level, name) pairs to compare producers under."""
    count: dict[tuple[str, str], int] = {}
    for s in history.get("series", []):
        if s["level"] == "topic" and s["kind"] == "publish":
            for p in _topic_parents(s["name"], _groups(rgs)):
                count[p] = count.get(p, 0) + 1
    return sorted(p for p, n in count.items() if n >= 2)


def child_shares(history: dict[str, Any], parent: tuple[str, str], rgs: dict[str, Any] | None = None,
                 last_s: float = 60.0) -> dict[str, float]:
    """Mean admitted msgs/s of each topic (producer) under ``parent`` over the last ``last_s`` seconds."""
    groups = _groups(rgs)
    return {s["name"]: mean(s["points"], "admittedMsgsPerSecond", last_s) or 0.0
            for s in history.get("series", [])
            if s["level"] == "topic" and s["kind"] == "publish" and parent in _topic_parents(s["name"], groups)}


def rg_rows(rgs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for g in rgs.get("resourceGroups", []):
        for direction in ("publish", "dispatch"):
            d = g.get(direction) or {}
            for pid, u in d.get("participants", {}).items():
                rows.append({"group": g["name"], "direction": direction, "participant": pid,
                             "usage msgs/s": round(u["usage_msgs_per_s"], 2),
                             "demand msgs/s": round(u["demand_msgs_per_s"], 2),
                             "quota msgs/s": limit_value(round(u["allocation_msgs_per_s"], 2), False),
                             "usage bytes/s": round(u["usage_bytes_per_s"]),
                             "quota bytes/s": limit_value(round(u["allocation_bytes_per_s"]), False),
                             "group quota msgs/s": limit_value(d.get("quotaMsgsPerSecond"))})
    return rows


def offload_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"participant": p["participantId"], "permits bytes/s": limit_value(o["limit_bytes_per_s"]),
             "limited": o["limited_total"], "read bytes": o["read_bytes_total"],
             "offload s": round(o["offload_time_seconds_total"], 2), "max read bytes": o["reading_max_bytes"],
             "errors": o["errors_total"]}
            for p in doc.get("participants", []) if (o := p.get("offload"))]


def offload_sample(doc: dict[str, Any], now: float) -> dict[str, float] | None:
    """One sample of every live participant's offload totals (None when none reports offload)."""
    stats = [(p["lastSeen"], p["offload"]) for p in doc.get("participants", []) if p.get("offload")]
    if not stats:
        return None
    return {"t": now, "seen": max(seen for seen, _ in stats),
            "rate": math.fsum(o.get("rate_bytes_per_s", 0.0) for _, o in stats),
            "read": math.fsum(o["read_bytes_total"] for _, o in stats),
            "limited": float(sum(o["limited_total"] for _, o in stats))}


def offload_points(samples: list[dict[str, float]]) -> list[dict[str, Any]]:
    """History points from successive samples: read bytes/s (the participants' own window rate when they report
    one, else the counter's growth) and limited reads per second (a counter that went down restarts)."""
    points = []
    for a, b in zip(samples, samples[1:], strict=False):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        grew = b["read"] - a["read"] if b["read"] >= a["read"] else b["read"]
        limited = b["limited"] - a["limited"] if b["limited"] >= a["limited"] else b["limited"]
        points.append({"t": b["t"], "admittedBytesPerSecond": b["rate"] if b["rate"] > 0 else grew / dt,
                       "throttledPerSecond": limited / dt})
    return points


def mutation_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"user": m["user"], "client id": m["client_id"], "participant": p["participantId"],
             "tokens": round(m["tokens"], 2), "rate /s": round(m["rate"], 2),
             "throttle s": round(m["throttle_time_s"], 3)}
            for p in doc.get("participants", []) for m in p.get("mutationQuotas", [])]


def check_limit(value: Any) -> str | None:
    """None when ``value`` is a valid limit, else what is wrong and what is allowed (as the control plane says)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"{value!r} is not allowed: {LIMIT_RULE}"
    if value < 0 and value != -1:
        return f"{value:g} is not allowed: {LIMIT_RULE}"
    return None


def _show(v: Any, field: str = "") -> str:
    """A value as the audit log and the confirmation show it; a limit field's "unlimited" in words."""
    if field and LIMIT_FIELD.search(field) and isinstance(limit_value(v), str) and v is not None:
        return UNLIMITED
    return "(not set)" if v is None else json.dumps(v) if not isinstance(v, str) else v


def diff_rows(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[dict[str, str]]:
    """Field by field old -> new (None: not set / removed)."""
    keys = list(dict.fromkeys([*(old or {}), *(new or {})]))
    return [{"field": k, "old": _show((old or {}).get(k), k), "new": _show((new or {}).get(k), k),
             "changed": "yes" if (old or {}).get(k) != (new or {}).get(k) else ""} for k in keys]


def change_text(old: Any, new: Any) -> str:
    """One line for an audit entry: the fields that changed, ``field: old -> new``."""
    if isinstance(old, dict) and isinstance(new, dict):
        changed = [f"{k}: {_show(old.get(k), k)} → {_show(new.get(k), k)}" for k in dict.fromkeys([*old, *new])
                   if old.get(k) != new.get(k)]
        return ", ".join(changed) or "no change"
    if old is None:
        return "set " + (", ".join(f"{k}: {_show(v, k)}" for k, v in new.items()) if isinstance(new, dict)
                         else _show(new))
    if new is None:
        return "removed (was " + (", ".join(f"{k}: {_show(v, k)}" for k, v in old.items()) if isinstance(old, dict)
                                  else _show(old)) + ")"
    return f"{_show(old)} → {_show(new)}"


def applied(doc: dict[str, Any], version: int) -> tuple[int, int, list[dict[str, Any]]]:
    """(participants on ``version`` or later, live participants, one row each)."""
    rows = [{"participant": p["participantId"], "host": p["host"], "applied version": p["appliedPolicyVersion"],
             "applied": "yes" if p["appliedPolicyVersion"] >= version else "not yet",
             "last report": ago(p.get("secondsSinceLastSeen", 0.0))} for p in doc.get("participants", [])]
    return sum(r["applied"] == "yes" for r in rows), len(rows), rows


def audit_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"version": e["policyVersion"], "time": e["time"], "actor": e["actor"], "method": e["method"],
             "endpoint": e["endpoint"], "change": change_text(e.get("oldValue"), e.get("newValue")),
             "old": _show(e.get("oldValue")), "new": _show(e.get("newValue"))}
            for e in doc.get("entries", [])]


def is_empty(participants: dict[str, Any], history: dict[str, Any] | None = None) -> bool:
    """Nothing to show yet: no participant alive or departed, and no history."""
    return not (participants.get("participants") or participants.get("departed")
                or (history or {}).get("series"))
