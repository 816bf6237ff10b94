"""What ``/v1/state/*`` answers, built from the live state: the typed views of ``protocol.state``.

Each function reads one consistent ``LiveState.snapshot()`` (or the usage index, or the history) and builds the
view outside the state's lock: the reports in a snapshot are never mutated (an accepted report replaces its
participant's ``Peer``), so building a view never holds up ingestion.

A participant's allocation of a resource group is ``metrics.allocation.allocations`` -- the grant book's fair
rate for a participant under grants, PIP-82's usage-based split for the others -- the computation the metrics use
too; ``shared`` joins the usage index with the grant book's windows the same way. The usage these views show is
what each participant admitted over the last few seconds, from its counters (``controlplane.admitted``), where
that can be read: the reported usage of one interval swings with the sends' size; shares and allocations are
computed from the reported usage, as the grants and the metrics are.
"""

from __future__ import annotations

import math
from typing import Any

from controlplane.admitted import admitted_per_s
from controlplane.state import HISTORY_S, LEVEL_ORDER, LiveState, Peer
from metrics.allocation import ShareSource, allocations, shares
from protocol import PolicySet, UsageValues, limit_key, parse_limit_key
from protocol.state import (
    UNLIMITED,
    AdaptiveTraceState,
    BucketRow,
    BucketsState,
    BucketTotal,
    DepartedView,
    GroupDirection,
    GroupUser,
    HistoryState,
    ParticipantsState,
    ParticipantView,
    QueueRow,
    QueuesState,
    ResourceGroupsState,
    ResourceGroupView,
    SharedLimit,
    SharedParticipant,
    SharedState,
)

__all__ = ["participants", "buckets", "queues", "resource_groups", "history", "shared"]


def _level_rank(level: str) -> int:
    return LEVEL_ORDER.index(level) if level in LEVEL_ORDER else len(LEVEL_ORDER)


def _describe(pid: str, peer: Peer, now: float, version: int | None) -> dict[str, Any]:
    r, who = peer.report, peer.report.participant
    return {
        "participantId": pid, "applicationId": who.application_id, "executorId": who.executor_id,
        "host": who.host, "pid": who.pid, "alive": True, "firstSeen": peer.first_seen,
        "lastSeen": peer.last_seen, "secondsSinceLastSeen": max(0.0, now - peer.last_seen),
        "appliedPolicyVersion": r.applied_policy_version,
        "upToDate": None if version is None else r.applied_policy_version == version,
        "seq": r.seq, "reports": peer.reports, "intervalSeconds": r.interval_s,
        "dispatchThrottled": dict(r.dispatch_throttled), "offload": r.offload, "mutationQuotas": r.mutation_quotas,
    }


def participants(live: LiveState, version: int) -> ParticipantsState:
    snap = live.snapshot()
    return ParticipantsState(
        policyVersion=version, reportIntervalSeconds=live.reach_s,
        participants=[ParticipantView(**_describe(pid, peer, snap.now, version)) for pid, peer in snap.peers],
        departed=[DepartedView(**{**_describe(d.pid, d.peer, d.at, None), "alive": False,
                                  "departedBecause": d.why, "departedAt": d.at})
                  for d in reversed(snap.departed)])


def buckets(live: LiveState) -> BucketsState:
    rows: list[BucketRow] = []
    totals: dict[tuple[str, str, str], BucketTotal] = {}
    for pid, peer in live.snapshot().peers:
        for b in peer.report.buckets:
            rows.append(BucketRow(participantId=pid, level=b.level, name=b.name, kind=b.kind, msgs=b.msgs,
                                  bytes=b.bytes, reportedAt=peer.last_seen))
            total = totals.setdefault((b.level, b.kind, b.name), BucketTotal(
                level=b.level, name=b.name, kind=b.kind, participants=0))
            total.participants += 1
            for dim in ("msgs", "bytes"):
                snap, sums = getattr(b, dim), getattr(total, dim)
                if snap is not None:
                    sums.tokens += snap.tokens
                    sums.rate += snap.rate
                    sums.capacity += snap.capacity

    def order(x: BucketRow | BucketTotal) -> tuple[int, str, str]:
        return _level_rank(x.level), x.kind, x.name
    return BucketsState(buckets=sorted(rows, key=order), totals=sorted(totals.values(), key=order))


def queues(live: LiveState) -> QueuesState:
    rows = [QueueRow(participantId=pid, level=q.level, name=q.name, length=max(q.length, len(q.entries)),
                     entries=q.entries)
            for pid, peer in live.snapshot().peers for q in peer.report.queues]
    return QueuesState(queues=sorted(rows, key=lambda q: (_level_rank(q.level), q.name, q.participantId)))


def _shown(live: LiveState, usage: dict[str, dict[str, UsageValues]]) -> dict[str, dict[str, UsageValues]]:
    """``usage`` (limit key -> participant -> reported values) with each participant's usage replaced by what it
    admitted over its last few seconds, where its counters tell (``controlplane.admitted``), and its demand by
    that usage times the factor it reported (demand / usage: ``1 / (1 - paused)``, measured in time, not in sends;
    a participant that admitted nothing in its last interval keeps the demand it reported)."""
    limiter = {key: parse_limit_key(key) for key in usage}   # (level, direction, name): a limiter's (level, kind, name)
    wanted: dict[str, list[tuple[str, str, str]]] = {}
    for key, users in usage.items():
        for pid in users:
            wanted.setdefault(pid, []).append(limiter[key])
    read = {pid: admitted_per_s(peer.span, peer.report, wanted[pid])
            for pid, peer in live.snapshot().peers if pid in wanted and peer.span is not None}
    out: dict[str, dict[str, UsageValues]] = {}
    for key, users in usage.items():
        out[key] = {}
        for pid, u in users.items():
            rates = read.get(pid, {}).get(limiter[key])
            out[key][pid] = u if rates is None else u.model_copy(update={
                "usage_msgs_per_s": rates[0], "usage_bytes_per_s": rates[1],
                "demand_msgs_per_s": _demand(rates[0], u.usage_msgs_per_s, u.demand_msgs_per_s),
                "demand_bytes_per_s": _demand(rates[1], u.usage_bytes_per_s, u.demand_bytes_per_s)})
    return out


def _demand(usage: float, reported_usage: float, reported_demand: float) -> float:
    if reported_usage <= 0:
        return max(reported_demand, usage)
    return max(usage, usage * reported_demand / reported_usage)


def resource_groups(live: LiveState, ps: PolicySet, grants: ShareSource | None = None) -> ResourceGroupsState:
    """Per resource group, its configuration and attachments, and per direction each live participant's usage,
    demand and allocation (what ``grants``, the grant book, grants it; see ``metrics.allocation``)."""
    everyone = live.shared_usage()   # (after expiry: a silent participant is gone here too)
    used = {key: everyone.get(key, {}) for key in
            (limit_key("resource_group", d, name) for name in ps.resourceGroups for d in ("publish", "dispatch"))}
    book = shares(grants, used, ps)
    shown = _shown(live, used)
    groups = []
    for name, rg in sorted(ps.resourceGroups.items()):
        strategy = ps.quota_strategy(name)
        directions = {}
        for direction, msgs_cap, bytes_cap in (("publish", rg.publishRateInMsgs, rg.publishRateInBytes),
                                               ("dispatch", rg.dispatchRateInMsgs, rg.dispatchRateInBytes)):
            key = limit_key("resource_group", direction, name)
            users = used[key]
            alloc_m = allocations(msgs_cap, strategy, users, "msgs", book.get(key))
            alloc_b = allocations(bytes_cap, strategy, users, "bytes", book.get(key))
            directions[direction] = GroupDirection(
                quotaMsgsPerSecond=msgs_cap, quotaBytesPerSecond=bytes_cap,
                participants={p: GroupUser(**u.model_dump(), allocation_msgs_per_s=alloc_m[p],
                                           allocation_bytes_per_s=alloc_b[p]) for p, u in sorted(shown[key].items())})
        groups.append(ResourceGroupView(
            name=name, configured=rg.model_dump(exclude_none=True), strategy=strategy,
            topics=sorted(k for k, v in ps.topicResourceGroups.items() if v == name),
            namespaces=sorted(k for k, v in ps.namespaceResourceGroups.items() if v == name),
            tenants=sorted(k for k, v in ps.tenantResourceGroups.items() if v == name), **directions))
    return ResourceGroupsState(policyVersion=ps.version, strategy=ps.quota_strategy(), resourceGroups=groups)


def history(live: LiveState, level: str | None = None, name: str | None = None,
            seconds: float = HISTORY_S) -> HistoryState:
    return HistoryState.model_validate(live.history(level, name, seconds))


def _per_s(value: float | None, limit: float | None) -> float | str | None:
    """A grant-side value: 'unlimited' when the limit is not set, None when nobody asked (no window)."""
    return UNLIMITED if limit is None else value


def _shared_limit(key: str, users: dict[str, UsageValues], grants: dict[str, Any]) -> SharedLimit:
    level, direction, name = parse_limit_key(key)
    out: dict[str, Any] = {"key": key, "level": level, "direction": direction, "name": name,
                           "windowSeconds": grants["windowSeconds"], "askers": grants["askers"],
                           "adaptive": grants.get("adaptive")}
    people: dict[str, dict[str, Any]] = {pid: {"participantId": pid} for pid in sorted(users)}
    for dim, word in (("msgs", "Msgs"), ("bytes", "Bytes")):
        limit, granted = grants[dim]["limitPerSecond"], grants[dim]["granted"]
        usage = math.fsum(getattr(u, f"usage_{dim}_per_s") for u in users.values())
        mine = 0.0
        for pid, u in users.items():
            held = grants["holders"].get(pid, {}).get(dim) or {}
            mine += held.get("granted") or 0.0
            people[pid].update({f"demand{word}PerSecond": getattr(u, f"demand_{dim}_per_s"),
                                f"usage{word}PerSecond": getattr(u, f"usage_{dim}_per_s"),
                                f"share{word}PerSecond": _per_s(held.get("fairPerSecond"), limit),
                                f"granted{word}InWindow": _per_s(held.get("granted"), limit)})
        out.update({f"limit{word}PerSecond": UNLIMITED if limit is None else limit,
                    f"usage{word}PerSecond": usage,
                    f"demand{word}PerSecond": math.fsum(getattr(u, f"demand_{dim}_per_s") for u in users.values()),
                    f"granted{word}InWindow": _per_s(granted, limit),
                    f"granted{word}ToOthers": max(0.0, (granted or 0.0) - mine),
                    "utilisation" if dim == "msgs" else "utilisationBytes": None if limit is None else usage / limit})
    return SharedLimit(**out, participants=[SharedParticipant(**p) for p in people.values()])


def _order(key: str) -> tuple[int, str, str]:
    level, direction, name = parse_limit_key(key)
    return _level_rank(level), direction, name


def shared(live: LiveState, ps: PolicySet, book_of: Any, learning: bool) -> SharedState:
    """Per shared limit any live participant uses (or any participant asked grants of): usage and demand from the
    usage index, shares and grants from ``book_of`` (``GrantBook.shares``)."""
    usage = live.shared_usage()
    book = book_of({k: list(users) for k, users in usage.items()}, ps)
    usage = _shown(live, usage)
    return SharedState(policyVersion=ps.version, learning=learning,
                       limits=[_shared_limit(key, usage.get(key, {}), book[key]) for key in sorted(book, key=_order)])


def adaptive(traces: dict[str, list[dict[str, float]]]) -> AdaptiveTraceState:
    """Per adaptive limit (``GrantBook.adaptive_trace``), its points, by limit key."""
    return AdaptiveTraceState(limits=[{"key": key, "points": points} for key, points in traces.items()])
