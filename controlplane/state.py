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

History: for each limiter (level, kind, name) a ring buffer of 15 minutes at report resolution (one slot per
report interval). A slot holds, per participant, the rates derived from the counter deltas between its last two
reports (admitted msgs/s and bytes/s, throttle seconds per second, throttles per second) and its tokens; a slot's
value is the sum over participants, so jitter in report timing does not double or drop a participant's rate.

Allocation of resource-group quotas uses ``limiter.quota.local_quotas``, the same function participants run,
with the group's strategy (``PolicySet.quota_strategy``), so the dashboard shows what participants compute.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from limiter.quota import DEFAULT_STRATEGY, local_quotas
from metrics.report import LimiterCounters, PolicySet, Report, UsageValues, limit_key

HISTORY_S = 900.0
MAX_SERIES = 5000
MAX_DEPARTED = 256
LEVEL_ORDER = ("broker", "resource_group", "tenant", "namespace", "topic", "subscription")


@dataclass
class Peer:
    report: Report
    first_seen: float
    last_seen: float
    reports: int = 1
    usage: dict[str, UsageValues] = field(default_factory=dict)


@dataclass
class Slot:
    index: int
    values: dict[str, tuple[float, ...]] = field(default_factory=dict)  # participant -> rates and tokens
    sums: tuple[float | None, ...] | None = None  # once closed: per field, the sum over participants (None: none)
    count: int = 0                                # once closed: how many participants it held

    def totals(self) -> tuple[tuple[float | None, ...], int]:
        """Per field, the sum over participants (None when none had a value), and the number of participants."""
        if self.sums is not None:
            return self.sums, self.count
        width = len(next(iter(self.values.values()), ()))
        sums = tuple(math.fsum(vals) if (vals := [v[i] for v in self.values.values() if not math.isnan(v[i])])
                     else None for i in range(width))
        return sums, len(self.values)

    def close(self) -> None:
        """The slot is past: keep its sums only, so a slot's memory does not grow with the participants (1,000
        participants x 15 minutes of per-participant values would be gigabytes)."""
        if self.sums is None:
            self.sums, self.count = self.totals()
            self.values = {}


def _allocate(configured: float, usage: dict[str, float], demand: dict[str, float],
              strategy: str = DEFAULT_STRATEGY) -> dict[str, float]:
    """Each participant's share of one dimension of a shared quota (-1 = unlimited)."""
    if not usage:
        return {}
    return local_quotas(strategy, configured, usage, demand)


class LiveState:
    def __init__(self, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        self.interval_s = interval_s
        self.stale_s = 2 * interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._peers: dict[str, Peer] = {}   # least recently heard from first (expiry stops at the first live one)
        self._usage: dict[str, dict[str, UsageValues]] = {}  # limit key -> participant -> usage (usage_map's index)
        self._departed: deque[dict[str, Any]] = deque(maxlen=MAX_DEPARTED)
        self._history: dict[tuple[str, str, str], deque[Slot]] = {}
        self._slots = max(1, math.ceil(HISTORY_S / interval_s))
        # per participant: (slot index, its last report in that slot), and the report that opened the current slot
        self._last_in_slot: dict[str, tuple[int, Report]] = {}
        self._slot_base: dict[str, tuple[int, Report]] = {}
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
            self._record_history(pid, report, now)
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
        self._last_in_slot.pop(pid, None)
        self._slot_base.pop(pid, None)
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

    def _record_history(self, pid: str, cur: Report, now: float) -> None:
        # A slot's rates span from the participant's last report of an earlier slot to its latest report in
        # this one: an extra report within a slot (a job asking for fresh shares) refines the slot's value
        # instead of replacing it with a rate over a few milliseconds, which made the history spiky.
        index = int(now // self.interval_s)
        last = self._last_in_slot.get(pid)
        if last is None:  # a participant's first report: later ones in its first slot are measured from it
            self._slot_base[pid] = (index, cur)
        elif last[0] < index:
            self._slot_base[pid] = (index, last[1])
        self._last_in_slot[pid] = (index, cur)
        base = self._slot_base.get(pid)
        prev = base[1] if base is not None and base[0] == index else None
        dt = cur.sent_at - prev.sent_at if prev is not None else 0.0
        before: dict[tuple[str, str, str], LimiterCounters] = (
            {(c.level, c.kind, c.name): c for c in prev.counters} if prev is not None and dt > 0 else {})
        tokens = {(b.level, b.kind, b.name): (b.msgs.tokens if b.msgs else math.nan,
                                              b.bytes.tokens if b.bytes else math.nan) for b in cur.buckets}
        keys = dict.fromkeys([*((c.level, c.kind, c.name) for c in cur.counters), *tokens])  # report order
        counters = {(c.level, c.kind, c.name): c for c in cur.counters}
        for key in keys:
            c, p = counters.get(key), before.get(key)
            if c is not None and p is not None:
                def rate(a: float, b: float) -> float:
                    return (a - b if a >= b else a) / dt   # a counter that went down was reset
                rates = (rate(c.admitted_msgs_total, p.admitted_msgs_total),
                         rate(c.admitted_bytes_total, p.admitted_bytes_total),
                         rate(c.throttle_time_seconds_total, p.throttle_time_seconds_total),
                         rate(c.throttled_count, p.throttled_count))
            else:
                rates = (math.nan,) * 4
            series = self._history.get(key)
            if series is None:
                if len(self._history) >= MAX_SERIES:
                    self._prune_history(index)
                if len(self._history) >= MAX_SERIES:
                    continue
                series = self._history[key] = deque(maxlen=self._slots)
            if not series or series[-1].index < index:
                if series:
                    series[-1].close()
                series.append(Slot(index))
            slot = next((s for s in reversed(series) if s.index <= index), series[-1])
            if slot.sums is None:  # (a closed slot is only ever picked when the clock stepped back)
                slot.values[pid] = rates + tokens.get(key, (math.nan, math.nan))

    def _prune_history(self, index: int) -> None:
        """Forget limiters with no point in the history window (bounded memory: at most MAX_SERIES series)."""
        for key in [k for k, s in self._history.items() if not s or s[-1].index < index - self._slots]:
            del self._history[key]

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

    def resource_groups(self, ps: PolicySet) -> dict[str, Any]:
        with self._lock:
            self._expire(self._clock())
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
                users = self.usage_map([limit_key("resource_group", direction, name)]).popitem()[1]
                alloc_m = _allocate(msgs_cap, {p: u.usage_msgs_per_s for p, u in users.items()},
                                    {p: u.demand_msgs_per_s for p, u in users.items()}, strategy)
                alloc_b = _allocate(bytes_cap, {p: u.usage_bytes_per_s for p, u in users.items()},
                                    {p: u.demand_bytes_per_s for p, u in users.items()}, strategy)
                entry[direction] = {
                    "quotaMsgsPerSecond": msgs_cap, "quotaBytesPerSecond": bytes_cap,
                    "participants": {p: {**u.model_dump(), "allocation_msgs_per_s": alloc_m[p],
                                         "allocation_bytes_per_s": alloc_b[p]} for p, u in sorted(users.items())}}
            groups.append(entry)
        return {"policyVersion": ps.version, "strategy": ps.quota_strategy(), "resourceGroups": groups}

    def history(self, level: str | None = None, name: str | None = None, seconds: float = HISTORY_S) -> dict[str, Any]:
        now = self._clock()
        first = int((now - seconds) // self.interval_s)
        fields = ("admittedMsgsPerSecond", "admittedBytesPerSecond", "throttleSecondsPerSecond",
                  "throttledPerSecond", "tokensMsgs", "tokensBytes")
        with self._lock:
            series = []
            for (lv, kind, nm), slots in sorted(self._history.items()):
                if (level is not None and lv != level) or (name is not None and nm != name):
                    continue
                points = []
                for s in slots:
                    if s.index < first:
                        continue
                    point: dict[str, Any] = {"t": s.index * self.interval_s}
                    sums, count = s.totals()
                    for i, f in enumerate(fields):
                        point[f] = sums[i] if i < len(sums) else None
                    point["participants"] = count
                    points.append(point)
                if points:
                    series.append({"level": lv, "kind": kind, "name": nm, "points": points})
        return {"intervalSeconds": self.interval_s, "windowSeconds": seconds, "series": series}
