"""One ``protocol.Report`` from the limiters' snapshots: what the control plane relays and the dashboard shows.

Names that would not pass the report's own rules (empty, too long, control characters) are left out rather than
sent: one odd topic name must not cost the whole report (and with it the heartbeat). Lists are cut at the
protocol's bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import protocol as wire
from limiter.offload import OffloadStats
from limiter.publish import LimiterSnapshot

__all__ = ["build_report"]

PUBLISH = wire.PUBLISH


def _label(s: str) -> bool:
    return 0 < len(s) <= wire.MAX_NAME and s.isprintable()


def _dim(tokens: float, rate: float, capacity: float, period_s: float) -> wire.DimensionSnapshot | None:
    if not all(math.isfinite(v) for v in (tokens, rate, capacity, period_s)) or period_s <= 0:
        return None
    return wire.DimensionSnapshot(tokens=tokens, rate=rate, capacity=capacity, period_s=period_s)


def _publish_parts(s: LimiterSnapshot, fair: tuple[float, float] | None = None) -> tuple:
    """``fair``: a pool's fair rates (msgs, bytes per second) from the control plane's grants, shown as its rate
    (a pool refills by grants, not by a rate of its own)."""
    def rate(b) -> float:
        if fair is None:
            return b.rate
        per_s = fair[0] if b.dimension == "msgs" else fair[1]
        return per_s * b.period_s if per_s >= 0 else b.rate
    dims = {b.dimension: _dim(b.tokens, rate(b), b.capacity, b.period_s) for b in s.buckets}
    bucket = (wire.BucketSnapshot(level=s.level, name=s.name, kind="publish", msgs=dims.get("msgs"),
                                  bytes=dims.get("bytes")) if dims else None)
    queue = (wire.QueueSnapshot(level=s.level, name=s.name, length=len(s.queue),
                                entries=[wire.QueueEntry(producer=e.producer, waiting_s=max(0.0, e.waiting_s))
                                         for e in s.queue[:wire.MAX_QUEUE_ENTRIES] if _label(e.producer)])
             if dims or s.queue else None)
    counters = wire.LimiterCounters(level=s.level, name=s.name, kind="publish", throttled_count=s.throttled_count,
                                    throttle_time_seconds_total=max(0.0, s.throttle_time_s),
                                    admitted_msgs_total=s.admitted_msgs, admitted_bytes_total=s.admitted_bytes)
    return bucket, queue, counters


def build_report(participant: wire.Participant, seq: int, sent_at: float, interval_s: float, applied_version: int,
                 send: dict[str, wire.UsageValues], unchanged: list[str], snapshots: dict, *,
                 fair: Callable[[str], tuple[float, float] | None], offload: OffloadStats,
                 mutations: list[dict[str, Any]]) -> wire.Report:
    """The report of one round (without asking for the usage map: shares come from grants): ``send`` (usage entries in full) and ``unchanged`` (keys suppressed), the
    limiters' ``snapshots`` (``{"publish": [...], "dispatch": [(limiter, snapshot, msgs, bytes), ...]}``),
    ``fair(limit_key)``: a pool's fair rates from its grants (shown as its rate), the offload and mutation-quota
    snapshots."""
    usage = []
    for key, v in send.items():
        level, direction, name = wire.parse_limit_key(key)
        if _label(name):
            usage.append(wire.SharedUsage(level=level, name=name, direction=direction,
                                          usage_msgs_per_s=v.usage_msgs_per_s, usage_bytes_per_s=v.usage_bytes_per_s,
                                          demand_msgs_per_s=v.demand_msgs_per_s,
                                          demand_bytes_per_s=v.demand_bytes_per_s))
    buckets, queues, counters = [], [], []
    for s in snapshots.get("publish", ()):
        if not _label(s.name):
            continue
        bucket, queue, counter = _publish_parts(s, fair(wire.limit_key(s.level, PUBLISH, s.name)))
        buckets += [bucket] if bucket else []
        queues += [queue] if queue else []
        counters.append(counter)
    throttled: dict[str, int] = {}
    for lim, snap, msgs, bytes_ in snapshots.get("dispatch", ()):
        if not _label(lim.name):
            continue
        rate = lim.rate
        msgs_dim = _dim(snap["msgs_tokens"], rate.msgs, rate.msgs, rate.period_s) if rate.msgs_limited else None
        bytes_dim = _dim(snap["bytes_tokens"], rate.bytes, rate.bytes, rate.period_s) if rate.bytes_limited else None
        if msgs_dim or bytes_dim:
            buckets.append(wire.BucketSnapshot(level=lim.level.value, name=lim.name, kind="dispatch",
                                               msgs=msgs_dim, bytes=bytes_dim))
        counters.append(wire.LimiterCounters(level=lim.level.value, name=lim.name, kind="dispatch",
                                             throttled_count=lim.throttled_count, admitted_msgs_total=msgs,
                                             admitted_bytes_total=bytes_))
        throttled[lim.level.value] = throttled.get(lim.level.value, 0) + lim.throttled_count
    o = offload
    offload_stats = wire.OffloadStats(limit_bytes_per_s=o.bytes_per_s if o.bytes_per_s > 0 else -1,
                                      limited_total=o.reads_limited, read_bytes_total=o.bytes_total,
                                      offload_time_seconds_total=o.offload_time_s,
                                      reading_max_bytes=o.reading_max_bytes, errors_total=o.errors)
    quotas = []
    for row in mutations[:wire.MAX_LIST]:
        user, client = row["user"] or "<any>", row["client_id"] or "<any>"
        if _label(user) and _label(client):
            quotas.append(wire.MutationQuotaSnapshot(
                user=user, client_id=client, tokens=row["tokens"], rate=max(0.0, row["mutation_rate_per_s"]),
                throttle_time_s=max(0.0, row["throttle_time_s"])))
    cap = wire.MAX_LIST
    return wire.Report(
        participant=participant, seq=seq, sent_at=sent_at, interval_s=interval_s,
        applied_policy_version=applied_version, usage=usage[:cap],
        usage_unchanged=[k for k in unchanged if _label(wire.parse_limit_key(k)[2])][:cap],
        buckets=buckets[:cap], queues=queues[:wire.MAX_QUEUES], counters=counters[:cap],
        dispatch_throttled=throttled, offload=offload_stats, mutation_quotas=quotas, usage_map=False)
