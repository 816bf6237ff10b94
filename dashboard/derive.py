"""Pure transforms from the control plane's answers to the rows and numbers the pages show.

How and why
-----------
No Streamlit, no HTTP: every function takes an answer as ``dashboard.data`` returns it -- a ``/v1/state/*``
answer as its ``protocol.state`` model (``HistoryState``, ``BucketsState``, ...), read by attribute, and the
policy document and audit log (``/v1/policies``, ``/admin/v2/audit``) as their JSON -- and returns lists of dicts
(a table's rows, keyed by its column names) or numbers, so the pages stay thin and these rules are unit-tested on
plain data. Rates come from the history the control plane derives from counter deltas
(one point per report interval, summed over participants), each taken over a span of several reports by
``data.history`` (``rates``); a bucket's limit per second is its refill ``rate``
divided by its ``period_s``, summed over the participants that hold a share of it. What is read from
``/v1/state/participants`` (freshness, offload, mutation quotas, who applied a version) is in
``derive_participants``, the shared limits of ``/v1/state/shared`` in ``derive_shared``.

Fairness: a producer's share is its part of the admitted throughput under a common limit, and Jain's index
``(sum x)^2 / (n * sum x^2)`` says how even the shares are (1 = equal, 1/n = one takes everything).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from protocol import resource_group_for, split_topic
from protocol.state import (
    BucketsState,
    HistoryPoint,
    HistorySeries,
    HistoryState,
    QueuesState,
    ResourceGroupsState,
    SharedState,
)

__all__ = ["UNLIMITED", "limit_value", "limit_text", "ago", "label", "Reading", "latest", "mean", "top_throttled",
           "limits_per_s", "admitted_vs_limit", "bucket_rows", "queue_rows", "jain", "parents", "child_shares",
           "rg_rows", "check_limit", "LIMIT_RULE", "diff_rows", "change_text", "audit_rows", "short_names"]

LIMIT_RULE = "a finite number >= 0, or -1 for unlimited (0 also means no limit)"
UNLIMITED = "unlimited"
LIMIT_FIELD = re.compile(r"Rate(In|Per)|Max\w*Rate$|PermitsPerSecond$|^quotaPerSecond$")  # a policy's limit fields
Key = tuple[str, str, str]                    # a limiter: (level, kind, name)
Reading = Callable[[HistoryPoint], float | None]   # one field of a point, e.g. ``lambda p: p.tokensMsgs``


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


def short_names(participant_ids: Iterable[str]) -> dict[str, str]:
    """Per participant id (``app/executor/host/pid/...``), the shortest name that tells it from the others: its
    executor, else executor/pid (a local master's Python workers share one executor), else the whole id."""
    ids = sorted(set(participant_ids))
    for pick in (lambda parts: parts[1:2], lambda parts: parts[1:2] + parts[3:4]):
        names = {pid: "/".join(pick(pid.split("/"))) or pid for pid in ids}
        if len(set(names.values())) == len(ids):
            return names
    return {pid: pid for pid in ids}


def label(level: str, name: str, kind: str = "publish") -> str:
    """A limiter as the pages name it: "topic acme/web/clicks", "resource group rg (dispatch)"."""
    return f"{level.replace('_', ' ')} {name}" + ("" if kind == "publish" else f" ({kind})")


def latest(points: Sequence[HistoryPoint], reading: Reading) -> float | None:
    """The newest value of ``reading`` (``lambda p: p.admittedMsgsPerSecond``) that is not None."""
    for p in reversed(points):
        value = reading(p)
        if value is not None:
            return value
    return None


def mean(points: Sequence[HistoryPoint], reading: Reading, last_s: float | None = None) -> float | None:
    """The mean of ``reading`` over the points (of the last ``last_s`` seconds) where it has a value."""
    if last_s is not None and points:
        horizon = points[-1].t - last_s
        points = [p for p in points if p.t > horizon]
    values = [v for v in map(reading, points) if v is not None]
    return math.fsum(values) / len(values) if values else None


def top_throttled(history: HistoryState, n: int = 10) -> list[dict[str, Any]]:
    """The limiters that held producers longest over the window, most first (throttle seconds per second)."""
    rows = []
    for s in history.series:
        held = mean(s.points, lambda p: p.throttleSecondsPerSecond) or 0.0
        count = math.fsum(p.throttledPerSecond * history.intervalSeconds for p in s.points if p.throttledPerSecond)
        if held > 0 or count > 0:
            rows.append({"target": label(s.level, s.name, s.kind), "level": s.level, "name": s.name,
                         "kind": s.kind, "throttle s/s": round(held, 3), "throttled": round(count),
                         "admitted msgs/s": round(latest(s.points, lambda p: p.admittedMsgsPerSecond) or 0.0, 1)})
    rows.sort(key=lambda r: (-r["throttle s/s"], -r["throttled"], r["target"]))
    return rows[:n]


def _configured(shared: SharedState | None) -> dict[Key, tuple[Any, Any]]:
    """Per shared limit, by its limiter (level, kind, name): its (msgs, bytes) per second as configured."""
    return {(x.level, x.direction, x.name): (x.limitMsgsPerSecond, x.limitBytesPerSecond)
            for x in (shared.limits if shared is not None else ())}


def limits_per_s(buckets: BucketsState, shared: SharedState | None = None) -> dict[Key, dict[str, float | None]]:
    """Per limiter, its limit per second in msgs and bytes (None = unlimited): a shared limit's as ``shared``
    configures it, any other the participants' bucket rates summed. (Under grants a participant's bucket is paced
    at what its grants hand it, so the rates of participants that want less than their share sum to less than the
    limit: a topic limit of 50 read 32.3.)"""
    out: dict[Key, dict[str, float | None]] = {}
    if not buckets.buckets:   # the totals only (data.bucket_totals): their sums of the limited rates per second
        out = {(t.level, t.kind, t.name): {"msgs": t.msgs.ratePerSecond, "bytes": t.bytes.ratePerSecond}
               for t in buckets.totals}
    for b in buckets.buckets:
        entry = out.setdefault((b.level, b.kind, b.name), {"msgs": None, "bytes": None})
        for dim, snap in (("msgs", b.msgs), ("bytes", b.bytes)):
            if snap is not None and snap.rate > 0:
                entry[dim] = (entry[dim] or 0.0) + snap.rate / snap.period_s
    for key, configured in _configured(shared).items():
        shown = [limit_value(v) for v in configured]
        out[key] = {dim: None if isinstance(v, str) else v for dim, v in zip(("msgs", "bytes"), shown, strict=True)}
    return out


def admitted_vs_limit(history: HistoryState, buckets: BucketsState, last_s: float = 10.0,
                      shared: SharedState | None = None) -> list[dict[str, Any]]:
    limits = limits_per_s(buckets, shared)
    rows = []
    for s in history.series:
        limit = limits.get((s.level, s.kind, s.name), {}).get("msgs")
        if limit is None:
            continue
        admitted = mean(s.points, lambda p: p.admittedMsgsPerSecond, last_s) or 0.0
        rows.append({"target": label(s.level, s.name, s.kind), "admitted msgs/s": round(admitted, 2),
                     "limit msgs/s": round(limit, 2), "use %": round(100 * admitted / limit, 1) if limit else None})
    return rows


def bucket_rows(buckets: BucketsState, shared: SharedState | None = None) -> list[dict[str, Any]]:
    """One row per limiter: its tokens summed over participants, and its limit -- a shared limit's as ``shared``
    configures it (see ``limits_per_s``), any other the participants' bucket rates summed."""
    configured = _configured(shared)
    rows = []
    for t in buckets.totals:
        msgs, byts = configured.get((t.level, t.kind, t.name), (t.msgs.rate, t.bytes.rate))
        rows.append({"level": t.level, "kind": t.kind, "name": t.name, "participants": t.participants,
                     "msgs tokens": round(t.msgs.tokens, 2), "msgs limit": limit_value(msgs),
                     "bytes tokens": round(t.bytes.tokens, 1), "bytes limit": limit_value(byts),
                     "in debt": t.msgs.tokens < 0 or t.bytes.tokens < 0})
    return rows


def queue_rows(queues: QueuesState) -> list[dict[str, Any]]:
    """One row per waiting producer, head of each queue first (position 1 resumes next)."""
    return [{"queue": label(q.level, q.name), "participant": q.participantId, "position": i + 1,
             "producer": e.producer, "waiting s": round(e.waiting_s, 3), "queue length": q.length}
            for q in queues.queues for i, e in enumerate(q.entries)]


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


def _groups(rgs: ResourceGroupsState | None) -> dict[str, str]:
    """Attached tenant, namespace or topic -> its resource group (their names never collide: 0, 1, 2 slashes)."""
    out: dict[str, str] = {}
    for g in rgs.resourceGroups if rgs is not None else []:
        for target in (*g.tenants, *g.namespaces, *g.topics):
            out[target] = g.name
    return out


def _topics(history: HistoryState) -> list[HistorySeries]:
    """The series of topics' publish limiters: each stands for the producers of one topic."""
    return [s for s in history.series if s.level == "topic" and s.kind == "publish"]


def parents(history: HistoryState, rgs: ResourceGroupsState | None = None) -> list[tuple[str, str]]:
    """Limits shared by two or more topics: (level, name) pairs to compare producers under."""
    count: dict[tuple[str, str], int] = {}
    groups = _groups(rgs)
    for s in _topics(history):
        for p in _topic_parents(s.name, groups):
            count[p] = count.get(p, 0) + 1
    return sorted(p for p, n in count.items() if n >= 2)


def child_shares(history: HistoryState, parent: tuple[str, str], rgs: ResourceGroupsState | None = None,
                 last_s: float = 60.0) -> dict[str, float]:
    """Mean admitted msgs/s of each topic (producer) under ``parent`` over the last ``last_s`` seconds."""
    groups = _groups(rgs)
    return {s.name: mean(s.points, lambda p: p.admittedMsgsPerSecond, last_s) or 0.0
            for s in _topics(history) if parent in _topic_parents(s.name, groups)}


def rg_rows(rgs: ResourceGroupsState) -> list[dict[str, Any]]:
    return [{"group": g.name, "direction": direction, "participant": pid,
             "usage msgs/s": round(u.usage_msgs_per_s, 2), "demand msgs/s": round(u.demand_msgs_per_s, 2),
             "quota msgs/s": limit_value(round(u.allocation_msgs_per_s, 2), False),
             "usage bytes/s": round(u.usage_bytes_per_s),
             "quota bytes/s": limit_value(round(u.allocation_bytes_per_s), False),
             "group quota msgs/s": limit_value(d.quotaMsgsPerSecond)}
            for g in rgs.resourceGroups for direction, d in (("publish", g.publish), ("dispatch", g.dispatch))
            for pid, u in d.participants.items()]


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


def audit_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"version": e["policyVersion"], "time": e["time"], "actor": e["actor"], "method": e["method"],
             "endpoint": e["endpoint"], "change": change_text(e.get("oldValue"), e.get("newValue")),
             "old": _show(e.get("oldValue")), "new": _show(e.get("newValue"))}
            for e in doc.get("entries", [])]
