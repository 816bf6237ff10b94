"""Ephemeral live state: participants, their latest reports, the usage map, and a short history.

How it works
------------
Nothing here is durable (PIP-82: usage needs no persistent storage). Each accepted report *replaces* the
participant's previous one: its usage entries plus its ``usage_unchanged`` keys are the complete list of shared
limits it uses right now (a limit missing from both is no longer used by it). ``usage_unchanged`` is PIP-82's
report suppression: the values held from the participant's previous report are kept for those keys; a key with
nothing held (a restarted control plane) is left out, and the participant, not finding itself in the answer's
usage map, sends it in full next time. The report itself (the heartbeat) is never suppressed, so expiry after 2
report intervals holds for every participant, whatever it suppresses. ``usage_map(keys)`` answers, for the shared limits one
participant reported, every live participant's usage and demand: ``{limit_key: {participant_id: UsageValues}}``.

Staleness, on one wall clock (``sent_at`` comes from the participant's host, so hosts need synchronised clocks):
a report sent more than 2 report intervals ago is ignored, as is one whose ``seq`` is not above the last accepted
one (PIP-82: discard old messages); a participant not heard from for 2 intervals is removed (``expire``, run on
every access), and ``goodbye`` removes one at once. Removed participants are remembered briefly as "departed".

History: every accepted report goes into ``controlplane.history.History`` (per limiter, 15 minutes at report
resolution), under the same lock.

Allocation of resource-group quotas: ``metrics.allocation.allocations``, the grant book's fair rate of each
participant under grants, PIP-82's usage-based split for the others -- the computation the metrics use too.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from controlplane.history import HISTORY_S, History
from metrics.allocation import ShareSource, allocations, shares
from protocol import PolicySet, Report, UsageValues, limit_key

__all__ = ["LiveState", "HISTORY_S", "LEVEL_ORDER"]

MAX_DEPARTED = 256
LEVEL_ORDER = ("broker", "resource_group", "tenant", "namespace", "topic", "subscription")


@dataclass
class Peer:
    report: Report
    first_seen: float
    last_seen: float
    reports: int = 1
    usage: dict[str, UsageValues] = field(default_factory=dict)


class LiveState:
    def __init__(self, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        self.interval_s = interval_s
        self.stale_s = 2 * interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._peers: dict[str, Peer] = {}   # least recently heard from first (expiry stops at the first live one)
        self._usage: dict[str, dict[str, UsageValues]] = {}  # limit key -> participant -> usage (usage_map's index)
        self._departed: deque[dict[str, Any]] = deque(maxlen=MAX_DEPARTED)
        self._history = History(interval_s)
        # told, under the lock, of reports replaced and participants removed (metrics.collector keeps totals)
        self.listener: Any = None

    # ------------------------------------------------------------ ingestion

    def ingest(self, report: Report) -> tuple[bool, str | None]:
        """Record one report. Returns (accepted, reason it was ignored)."""
        now = self._clock()
        pid = report.participant.participant_id
        with self._lock:
            self._expire(now)
            age = now - report.sent_at
            if age > self.stale_s:
                return False, f"the report was sent {age:.3f}s ago, more than 2 report intervals ({self.stale_s:g}s)"
            peer = self._peers.get(pid)
            if peer is not None and report.seq <= peer.report.seq:
                return False, f"seq {report.seq} is not above the last accepted seq {peer.report.seq}"
            self._history.record(pid, report, now)
            if peer is not None and self.listener is not None:
                self.listener.replaced(peer.report, report)
            usage = {limit_key(u.level, u.direction, u.name): UsageValues(
                usage_msgs_per_s=u.usage_msgs_per_s, usage_bytes_per_s=u.usage_bytes_per_s,
                demand_msgs_per_s=u.demand_msgs_per_s, demand_bytes_per_s=u.demand_bytes_per_s)
                for u in report.usage}
            if peer is not None:  # suppressed entries keep the values last sent (none held: left out)
                for key in report.usage_unchanged:
                    held = peer.usage.get(key)
                    if held is not None:
                        usage[key] = held
            self._index(pid, peer.usage if peer is not None else {}, usage)
            if peer is None:
                self._peers[pid] = Peer(report=report, first_seen=now, last_seen=now, usage=usage)
            else:
                peer.report, peer.last_seen, peer.usage = report, now, usage
                peer.reports += 1
                self._peers[pid] = self._peers.pop(pid)  # now the most recently heard from
            return True, None

    def _index(self, pid: str, old: dict[str, UsageValues], new: dict[str, UsageValues]) -> None:
        """Keep ``_usage`` (limit key -> participant -> usage) in step with one participant's usage."""
        for key in old.keys() - new.keys():
            users = self._usage[key]
            del users[pid]
            if not users:
                del self._usage[key]
        for key, value in new.items():
            self._usage.setdefault(key, {})[pid] = value

    def goodbye(self, participant_id: str) -> bool:
        with self._lock:
            peer = self._peers.pop(participant_id, None)
            if peer is not None:
                self._depart(participant_id, peer, "goodbye", self._clock())
            return peer is not None

    def _depart(self, pid: str, peer: Peer, why: str, now: float) -> None:
        self._index(pid, peer.usage, {})
        self._history.forget(pid)
        if self.listener is not None:
            self.listener.departed(peer.report, why)
        self._departed.append({**self._describe(pid, peer, now, None), "alive": False, "departedBecause": why,
                               "departedAt": now})

    def _expire(self, now: float) -> None:
        stale = []
        for pid, peer in self._peers.items():  # least recently heard from first: stop at the first live one
            if now - peer.last_seen <= self.stale_s:
                break
            stale.append(pid)
        for pid in stale:
            self._depart(pid, self._peers.pop(pid), "expired", now)
        horizon = now - HISTORY_S
        while self._departed and self._departed[0]["departedAt"] < horizon:
            self._departed.popleft()

    # ------------------------------------------------------------ queries

    def usage_map(self, keys: Iterable[str]) -> dict[str, dict[str, UsageValues]]:
        keys = list(keys)
        with self._lock:
            return {k: dict(self._usage.get(k, ())) for k in keys}

    def shared_usage(self) -> dict[str, dict[str, UsageValues]]:
        """Every shared limit any live participant uses: limit key -> participant -> its latest usage and demand."""
        with self._lock:
            self._expire(self._clock())
            return {k: dict(users) for k, users in sorted(self._usage.items())}

    def _describe(self, pid: str, peer: Peer, now: float, version: int | None) -> dict[str, Any]:
        r, who = peer.report, peer.report.participant
        return {
            "participantId": pid, "applicationId": who.application_id, "executorId": who.executor_id,
            "host": who.host, "pid": who.pid, "alive": True, "firstSeen": peer.first_seen,
            "lastSeen": peer.last_seen, "secondsSinceLastSeen": max(0.0, now - peer.last_seen),
            "appliedPolicyVersion": r.applied_policy_version,
            "upToDate": None if version is None else r.applied_policy_version == version,
            "seq": r.seq, "reports": peer.reports, "intervalSeconds": r.interval_s,
            "dispatchThrottled": dict(r.dispatch_throttled),
            "offload": None if r.offload is None else r.offload.model_dump(),
            "mutationQuotas": [m.model_dump() for m in r.mutation_quotas],
        }

    def participants(self, version: int) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            self._expire(now)
            return {"policyVersion": version, "reportIntervalSeconds": self.interval_s,
                    "participants": [self._describe(p, peer, now, version) for p, peer in sorted(self._peers.items())],
                    "departed": list(reversed(self._departed))}

    def _live_reports(self) -> list[tuple[str, Peer]]:
        self._expire(self._clock())
        return sorted(self._peers.items())

    def read_live(self, fn: Callable[[list[tuple[Report, dict[str, UsageValues]]]], Any]) -> Any:
        """``fn([(latest report, usage held by limit key)] of every live participant)``, called under the lock
        the listener runs under (metrics.collector reads live reports and its retired totals at one instant)."""
        with self._lock:
            return fn([(peer.report, peer.usage) for _, peer in self._live_reports()])

    def buckets(self) -> dict[str, Any]:
        with self._lock:
            rows, totals = [], {}
            for pid, peer in self._live_reports():
                for b in peer.report.buckets:
                    rows.append({"participantId": pid, "level": b.level, "name": b.name, "kind": b.kind,
                                 "msgs": b.msgs.model_dump() if b.msgs else None,
                                 "bytes": b.bytes.model_dump() if b.bytes else None, "reportedAt": peer.last_seen})
                    t = totals.setdefault((b.level, b.kind, b.name), {
                        "level": b.level, "name": b.name, "kind": b.kind, "participants": 0,
                        "msgs": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0},
                        "bytes": {"tokens": 0.0, "rate": 0.0, "capacity": 0.0}})
                    t["participants"] += 1
                    for dim in ("msgs", "bytes"):
                        snap = getattr(b, dim)
                        if snap is not None:
                            for f in ("tokens", "rate", "capacity"):
                                t[dim][f] += getattr(snap, f)
        def order(d: dict[str, Any]) -> tuple[int, str, str]:
            return LEVEL_ORDER.index(d["level"]), d["kind"], d["name"]
        return {"buckets": sorted(rows, key=order), "totals": sorted(totals.values(), key=order)}

    def queues(self) -> dict[str, Any]:
        with self._lock:
            rows = [{"participantId": pid, "level": q.level, "name": q.name, "length": max(q.length, len(q.entries)),
                     "entries": [e.model_dump() for e in q.entries]}
                    for pid, peer in self._live_reports() for q in peer.report.queues]
        return {"queues": sorted(rows, key=lambda d: (LEVEL_ORDER.index(d["level"]), d["name"], d["participantId"]))}

    def resource_groups(self, ps: PolicySet, grants: ShareSource | None = None) -> dict[str, Any]:
        """Per resource group, its configuration and attachments, and per direction each live participant's usage,
        demand and allocation (what ``grants``, the grant book, grants it; see ``metrics.allocation``)."""
        with self._lock:
            self._expire(self._clock())
        keys = [limit_key("resource_group", d, name) for name in ps.resourceGroups for d in ("publish", "dispatch")]
        used = self.usage_map(keys)
        book = shares(grants, used, ps)   # (outside the lock: the grant book has its own)
        groups = []
        for name, rg in sorted(ps.resourceGroups.items()):
            strategy = ps.quota_strategy(name)
            entry: dict[str, Any] = {
                "name": name, "configured": rg.model_dump(exclude_none=True), "strategy": strategy,
                "topics": sorted(k for k, v in ps.topicResourceGroups.items() if v == name),
                "namespaces": sorted(k for k, v in ps.namespaceResourceGroups.items() if v == name),
                "tenants": sorted(k for k, v in ps.tenantResourceGroups.items() if v == name)}
            for direction, msgs_cap, bytes_cap in (("publish", rg.publishRateInMsgs, rg.publishRateInBytes),
                                                   ("dispatch", rg.dispatchRateInMsgs, rg.dispatchRateInBytes)):
                key = limit_key("resource_group", direction, name)
                users = used[key]
                alloc_m = allocations(msgs_cap, strategy, users, "msgs", book.get(key))
                alloc_b = allocations(bytes_cap, strategy, users, "bytes", book.get(key))
                entry[direction] = {
                    "quotaMsgsPerSecond": msgs_cap, "quotaBytesPerSecond": bytes_cap,
                    "participants": {p: {**u.model_dump(), "allocation_msgs_per_s": alloc_m[p],
                                         "allocation_bytes_per_s": alloc_b[p]} for p, u in sorted(users.items())}}
            groups.append(entry)
        return {"policyVersion": ps.version, "strategy": ps.quota_strategy(), "resourceGroups": groups}

    def history(self, level: str | None = None, name: str | None = None, seconds: float = HISTORY_S) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            return self._history.view(now, level, name, seconds)
