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

Every view is built a step at a time (``controlplane.steps``), and its endpoint runs it on the event loop and sends
it a piece at a time (``controlplane.renders``). The two that grow with participants x limits -- ``bucket_steps``
and ``shared_steps``, 100,000 entries at 1,000 participants of 100 limits -- are built as plain JSON-ready dicts (a
pydantic model per entry cost five times the CPU) and pause every ``STEP_ENTRIES`` entries, ``shared_steps``
reading the grant book a few limits at a time; the others pause every ``STEP_PEERS`` participants or every
resource group. ``participants``, ``buckets``, ``shared`` and the others run them to their end and give the typed
model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

from controlplane.shown import Shown, shown_steps
from controlplane.state import HISTORY_S, LEVEL_ORDER, LiveState, Peer
from controlplane.steps import STEP_ENTRIES, STEP_PEERS, Steps, run
from metrics.allocation import ShareSource, allocations, shares
from protocol import MAX_NUMBER, PolicySet, limit_key, parse_limit_key
from protocol.state import (
    UNLIMITED,
    AdaptiveTraceState,
    BucketsState,
    GroupDirection,
    GroupUser,
    HistoryState,
    ParticipantsState,
    QueuesState,
    ResourceGroupsState,
    ResourceGroupView,
    SharedState,
)

__all__ = ["participants", "participant_steps", "buckets", "bucket_steps", "queues", "queue_steps", "resource_groups",
           "resource_group_steps", "history", "shared", "shared_steps", "BookReader", "Steps", "run"]


class BookReader(Protocol):
    """What ``shared`` reads of the grant book (``controlplane.grants.GrantBook``)."""

    def limit_keys(self) -> list[str]: ...

    def shares(self, holders: dict[str, Iterable[str]], policies: PolicySet,
               keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]: ...


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


def participant_steps(live: LiveState, version: int) -> Steps[dict[str, Any]]:
    """``ParticipantsState`` as JSON-ready dicts, a pause every ``STEP_PEERS`` participants."""
    snap = live.snapshot()
    rows = []
    for i, (pid, peer) in enumerate(snap.peers, 1):
        rows.append(_describe(pid, peer, snap.now, version))
        if i % STEP_PEERS == 0:
            yield None
    return {"policyVersion": version, "reportIntervalSeconds": live.reach_s, "participants": rows,
            "departed": [{**_describe(d.pid, d.peer, d.at, None), "alive": False, "departedBecause": d.why,
                          "departedAt": d.at} for d in reversed(snap.departed)]}


def participants(live: LiveState, version: int) -> ParticipantsState:
    return ParticipantsState.model_validate(run(participant_steps(live, version)))


def _dimension(snap: Any) -> dict[str, float] | None:
    return None if snap is None else {"tokens": snap.tokens, "rate": snap.rate, "capacity": snap.capacity,
                                      "period_s": snap.period_s}


def bucket_steps(live: LiveState, rows: bool = True) -> Steps[dict[str, Any]]:
    """``BucketsState`` as JSON-ready dicts, a pause every ``STEP_ENTRIES`` buckets; with ``rows`` False the totals
    only (what the dashboard's pages read: the rows are 21.7 MB at 1,000 participants of 100 limits, the totals
    a twentieth). Rows come per (level, kind, name) in that order, and in participant order within one: each
    limiter's rows gather in its own list, so only the limiters are sorted, not 100,000 rows."""
    per_limiter: dict[tuple[str, str, str], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    done = 0
    for pid, peer in live.snapshot().peers:
        for b in peer.report.buckets:
            msgs, size = _dimension(b.msgs), _dimension(b.bytes)
            got = per_limiter.get((b.level, b.kind, b.name))
            if got is None:
                got = per_limiter[(b.level, b.kind, b.name)] = ({
                    "level": b.level, "name": b.name, "kind": b.kind, "participants": 0,
                    "msgs": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0, "ratePerSecond": None},
                    "bytes": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0, "ratePerSecond": None}}, [])
            total, kept = got
            if rows:
                kept.append({"participantId": pid, "level": b.level, "name": b.name, "kind": b.kind, "msgs": msgs,
                             "bytes": size, "reportedAt": peer.last_seen})
            total["participants"] += 1
            for dim, snap in (("msgs", msgs), ("bytes", size)):
                if snap is not None:
                    sums = total[dim]
                    sums["tokens"] += snap["tokens"]
                    sums["rate"] += snap["rate"]
                    sums["capacity"] += snap["capacity"]
                    if snap["rate"] > 0:   # (at most MAX_NUMBER: a huge rate over a short period overflowed)
                        sums["ratePerSecond"] = min(MAX_NUMBER, (sums["ratePerSecond"] or 0.0)
                                                    + snap["rate"] / snap["period_s"])
        done += len(peer.report.buckets)
        if done >= STEP_ENTRIES:
            done = 0
            yield None
    order = sorted(per_limiter, key=lambda k: (_level_rank(k[0]), k[1], k[2]))
    return {"buckets": [row for k in order for row in per_limiter[k][1]],
            "totals": [per_limiter[k][0] for k in order]}


def buckets(live: LiveState, rows: bool = True) -> BucketsState:
    return BucketsState.model_validate(run(bucket_steps(live, rows)))


def queue_steps(live: LiveState) -> Steps[dict[str, Any]]:
    """``QueuesState`` as JSON-ready dicts, a pause every ``STEP_PEERS`` participants."""
    rows = []
    for i, (pid, peer) in enumerate(live.snapshot().peers, 1):
        rows.extend({"participantId": pid, "level": q.level, "name": q.name,
                     "length": max(q.length, len(q.entries)), "entries": q.entries} for q in peer.report.queues)
        if i % STEP_PEERS == 0:
            yield None
    return {"queues": sorted(rows, key=lambda q: (_level_rank(q["level"]), q["name"], q["participantId"]))}


def queues(live: LiveState) -> QueuesState:
    return QueuesState.model_validate(run(queue_steps(live)))


def resource_group_steps(live: LiveState, ps: PolicySet,
                         grants: ShareSource | None = None) -> Steps[ResourceGroupsState]:
    """Per resource group, its configuration and attachments, and per direction each live participant's usage,
    demand and allocation (what ``grants``, the grant book, grants it; see ``metrics.allocation``). A pause after
    each group."""
    everyone = live.shared_usage()   # (after expiry: a silent participant is gone here too)
    used = {key: everyone.get(key, {}) for key in
            (limit_key("resource_group", d, name) for name in ps.resourceGroups for d in ("publish", "dispatch"))}
    book = shares(grants, used, ps)
    shown = yield from shown_steps(live, used)
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
                participants={p: GroupUser(**u._asdict(), allocation_msgs_per_s=alloc_m[p],
                                           allocation_bytes_per_s=alloc_b[p]) for p, u in sorted(shown[key].items())})
        groups.append(ResourceGroupView(
            name=name, configured=rg.model_dump(exclude_none=True), strategy=strategy,
            topics=sorted(k for k, v in ps.topicResourceGroups.items() if v == name),
            namespaces=sorted(k for k, v in ps.namespaceResourceGroups.items() if v == name),
            tenants=sorted(k for k, v in ps.tenantResourceGroups.items() if v == name), **directions))
        yield None
    return ResourceGroupsState(policyVersion=ps.version, strategy=ps.quota_strategy(), resourceGroups=groups)


def resource_groups(live: LiveState, ps: PolicySet, grants: ShareSource | None = None) -> ResourceGroupsState:
    return run(resource_group_steps(live, ps, grants))


def history(live: LiveState, level: str | None = None, name: str | None = None,
            seconds: float = HISTORY_S) -> HistoryState:
    return HistoryState.model_validate(live.history(level, name, seconds))


def _per_s(value: float | None, limit: float | None) -> float | str | None:
    """A grant-side value: 'unlimited' when the limit is not set, None when nobody asked (no window)."""
    return UNLIMITED if limit is None else value


def _shared_limit(key: str, users: dict[str, Shown], grants: dict[str, Any], listed: bool = True) -> dict[str, Any]:
    """One ``SharedLimit``, as a JSON-ready dict (its participants listed when ``listed``)."""
    level, direction, name = parse_limit_key(key)
    holders, limit_m, limit_b = grants["holders"], grants["msgs"]["limitPerSecond"], grants["bytes"]["limitPerSecond"]
    people, mine_m, mine_b = [], 0.0, 0.0
    for pid in sorted(users):
        u, held = users[pid], holders.get(pid) or {}
        m, b = held.get("msgs") or {}, held.get("bytes") or {}
        mine_m += m.get("granted") or 0.0
        mine_b += b.get("granted") or 0.0
        if not listed:
            continue
        people.append({"participantId": pid,
                       "demandMsgsPerSecond": u.demand_msgs_per_s, "usageMsgsPerSecond": u.usage_msgs_per_s,
                       "shareMsgsPerSecond": _per_s(m.get("fairPerSecond"), limit_m),
                       "grantedMsgsInWindow": _per_s(m.get("granted"), limit_m),
                       "demandBytesPerSecond": u.demand_bytes_per_s, "usageBytesPerSecond": u.usage_bytes_per_s,
                       "shareBytesPerSecond": _per_s(b.get("fairPerSecond"), limit_b),
                       "grantedBytesInWindow": _per_s(b.get("granted"), limit_b)})
    out: dict[str, Any] = {"key": key, "level": level, "direction": direction, "name": name,
                           "windowSeconds": grants["windowSeconds"], "askers": grants["askers"],
                           "adaptive": grants.get("adaptive")}
    for dim, word, limit, mine in (("msgs", "Msgs", limit_m, mine_m), ("bytes", "Bytes", limit_b, mine_b)):
        granted = grants[dim]["granted"]
        usage = math.fsum(getattr(u, f"usage_{dim}_per_s") for u in users.values())
        out.update({f"limit{word}PerSecond": UNLIMITED if limit is None else limit,
                    f"usage{word}PerSecond": usage,
                    f"demand{word}PerSecond": math.fsum(getattr(u, f"demand_{dim}_per_s") for u in users.values()),
                    f"granted{word}InWindow": _per_s(granted, limit),
                    f"granted{word}ToOthers": max(0.0, (granted or 0.0) - mine),
                    "utilisation" if dim == "msgs" else "utilisationBytes": None if limit is None else usage / limit})
    out["participants"], out["participantCount"] = people, len(users)
    return out


def _order(key: str) -> tuple[int, str, str]:
    level, direction, name = parse_limit_key(key)
    return _level_rank(level), direction, name


def shared_steps(live: LiveState, ps: PolicySet, book: BookReader, learning: bool, listed: bool = True,
                 only: Iterable[str] | None = None) -> Steps[dict[str, Any]]:
    """``SharedState`` as JSON-ready dicts, a pause every ``STEP_ENTRIES`` entries: per shared limit any live
    participant uses or the grant book holds (those of ``only``, when given), usage and demand from the usage
    index, shares and grants from ``book`` (``GrantBook``), read a few limits at a time; each limit's
    participants listed when ``listed`` (the summary without: a page's table of limits does not need 100,000
    participants' rows)."""
    usage = live.shared_usage()
    keys = sorted({*usage, *book.limit_keys()}, key=_order)
    if only is not None:   # (and only their users' admitted rates read: a page's few limits cost it little)
        wanted = set(only)
        keys = [k for k in keys if k in wanted]
        usage = {k: users for k, users in usage.items() if k in wanted}
    yield None
    shown = yield from shown_steps(live, usage)
    limits: list[dict[str, Any]] = []
    start = 0
    while start < len(keys):
        end, entries = start, 0
        while end < len(keys) and entries < STEP_ENTRIES:
            entries += 1 + len(usage.get(keys[end], ()))
            end += 1
        chunk = keys[start:end]
        grants = book.shares({k: list(usage[k]) for k in chunk if k in usage}, ps, keys=chunk)
        limits.extend(_shared_limit(key, shown.get(key, {}), grants[key], listed) for key in chunk)
        start = end
        yield None
    return {"policyVersion": ps.version, "learning": learning, "limits": limits}


def shared(live: LiveState, ps: PolicySet, book: BookReader, learning: bool, listed: bool = True,
           only: Iterable[str] | None = None) -> SharedState:
    return SharedState.model_validate(run(shared_steps(live, ps, book, learning, listed, only)))


def adaptive(traces: dict[str, list[dict[str, float]]]) -> AdaptiveTraceState:
    """Per adaptive limit (``GrantBook.adaptive_trace``), its points, by limit key."""
    return AdaptiveTraceState(limits=[{"key": key, "points": points} for key, points in traces.items()])
