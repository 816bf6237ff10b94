"""Ephemeral live state: the participants, their latest reports and expiry; the usage index and the history.

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
The interval told to participants may be longer than the configured one (``controlplane.report_pace``); ``tell``
says which is told now, and "an interval" above is the longest any participant may still be following
(``reach_s``): one told ``X`` seconds at ``t`` reports again by ``t + X`` and is then told the current one, so an
interval told before counts until ``t + 2X``. Each live participant holds a slot, its place in the interval
(``controlplane.report_phase``): taken with its first accepted report, freed when it is removed.

Every accepted report also goes, under the same lock, into the usage index (``controlplane.usage_index``: limit
key -> participant -> usage, what the answers' usage maps read) and the history (``controlplane.history``: per
limiter, 15 minutes at report resolution). The history's part, and telling the listener which report a new one
replaced, wait until the report's answer has gone out (``settle``); whoever reads either first does them. What the
dashboard reads of all this is built by ``controlplane.views`` from ``snapshot()``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

from controlplane.admitted import Span, advance
from controlplane.history import HISTORY_S, History
from controlplane.report_phase import ReportSlots, next_report_in_s
from controlplane.usage_index import UsageIndex
from protocol import Report, UsageValues, limit_key

__all__ = ["LiveState", "Peer", "Departed", "Snapshot", "HISTORY_S", "LEVEL_ORDER"]

MAX_DEPARTED = 256
HISTORY_STEP_LIMITERS = 20   # limiters' series a history view reads between pauses (up to 90 points each)
LEVEL_ORDER = ("broker", "resource_group", "tenant", "namespace", "topic", "subscription")


@dataclass
class Peer:
    report: Report
    first_seen: float
    last_seen: float
    reports: int = 1
    usage: dict[str, UsageValues] = field(default_factory=dict)
    span: Span | None = None   # two earlier reports' counters: what it admitted over seconds (controlplane.admitted)


@dataclass(frozen=True, slots=True)
class Departed:
    pid: str
    peer: Peer
    why: str          # "goodbye" or "expired"
    at: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The live participants (by id) and the recently departed (oldest first) at one instant ``now``."""

    now: float
    peers: list[tuple[str, Peer]]
    departed: list[Departed]


class LiveState:
    def __init__(self, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        self.interval_s = interval_s   # the configured interval: the history's slots
        self.told_s = interval_s       # the interval told now (``tell``)
        self.reach_s = interval_s      # the longest interval a participant may still be following
        self._told_until: dict[float, float] = {}   # an interval told before -> until when one may follow it
        self._clock = clock
        self._lock = threading.Lock()
        self._peers: dict[str, Peer] = {}   # least recently heard from first (expiry stops at the first live one)
        self._slots = ReportSlots()          # each live participant's place in the interval (report_phase)
        self._usage = UsageIndex()
        self._departed: deque[Departed] = deque(maxlen=MAX_DEPARTED)
        self._history = History(interval_s)
        # accepted reports not yet in the history: recorded after the answer went out (``settle``), or by the next
        # call that reads or changes the history, whichever comes first
        self._unrecorded: deque[tuple[str, Report, float, Report | None]] = deque()   # (and the report it replaced)
        # told, under the lock, of reports replaced and participants removed (metrics.collector keeps totals)
        self.listener: Any = None

    @property
    def stale_s(self) -> float:
        """Reports sent longer ago are ignored, participants silent for longer expire: 2 intervals."""
        return 2 * self.reach_s

    # ------------------------------------------------------------ ingestion

    def tell(self, interval_s: float) -> None:
        """The answers tell participants to report every ``interval_s`` from now (``controlplane.report_pace``)."""
        if interval_s == self.told_s:
            return
        with self._lock:
            self._record()   # (recorded on the slots' grid it came in on)
            now = self._clock()
            # (one told the old interval just now reports again within it, and is then told this one; until it
            # has had 2 of them to, it may not expire)
            self._told_until[self.told_s] = now + 2 * self.told_s
            self._told_until.pop(interval_s, None)
            self.told_s = interval_s
            self._reckon(now)

    def _reckon(self, now: float) -> None:
        """``reach_s`` and the history's reach, from the intervals participants may still follow."""
        for interval, until in list(self._told_until.items()):
            if until < now:
                del self._told_until[interval]
        self.reach_s = max(self.told_s, *self._told_until) if self._told_until else self.told_s
        self._history.reach_slots = max(1, math.ceil(self.reach_s / self.interval_s - 1e-9))

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
            self._unrecorded.append((pid, report, now, None if peer is None else peer.report))
            self._slots.take(pid)
            usage = {limit_key(u.level, u.direction, u.name): UsageValues(
                usage_msgs_per_s=u.usage_msgs_per_s, usage_bytes_per_s=u.usage_bytes_per_s,
                demand_msgs_per_s=u.demand_msgs_per_s, demand_bytes_per_s=u.demand_bytes_per_s)
                for u in report.usage}
            if peer is not None:  # suppressed entries keep the values last sent (none held: left out)
                for key in report.usage_unchanged:
                    held = peer.usage.get(key)
                    if held is not None:
                        usage[key] = held
            self._usage.replace(pid, peer.usage if peer is not None else {}, usage)
            # a new Peer each time (not mutated): a snapshot taken before stays what it was
            self._peers.pop(pid, None)   # re-inserted last: now the most recently heard from
            self._peers[pid] = Peer(report=report, first_seen=now if peer is None else peer.first_seen,
                                    last_seen=now, reports=1 if peer is None else peer.reports + 1, usage=usage,
                                    span=advance(None if peer is None else peer.span, report))
            return True, None

    def settle(self) -> None:
        """Record the reports accepted since the last call in the history, and tell the listener what they
        replaced. ``ingest`` leaves both to after the report's answer has gone out: at 5,000 limiters a report they
        took 28 ms of its 80, and the participant waited for them though its answer reads neither. Whoever reads the
        history or the live reports first (and every ingest, expiry and departure) records what is left, in the
        order the reports came, so no reader sees the difference."""
        if self._unrecorded:
            with self._lock:
                self._record()

    def _record(self) -> None:
        while self._unrecorded:
            pid, report, at, previous = self._unrecorded.popleft()
            self._history.record(pid, report, at)
            if previous is not None and self.listener is not None:
                self.listener.replaced(previous, report)

    def goodbye(self, participant_id: str) -> bool:
        with self._lock:
            peer = self._peers.pop(participant_id, None)
            if peer is not None:
                self._depart(participant_id, peer, "goodbye", self._clock())
            return peer is not None

    def _depart(self, pid: str, peer: Peer, why: str, now: float) -> None:
        self._record()   # (before the history forgets the participant: a report recorded after would revive it)
        self._usage.replace(pid, peer.usage, {})
        self._history.forget(pid)
        self._slots.free(pid)
        if self.listener is not None:
            self.listener.departed(peer.report, why)
        self._departed.append(Departed(pid, peer, why, now))

    def _expire(self, now: float) -> None:
        self._record()   # (in the order the reports came, before this one and before anyone departs)
        if self._told_until:
            self._reckon(now)
        stale = []
        for pid, peer in self._peers.items():  # least recently heard from first: stop at the first live one
            if now - peer.last_seen <= self.stale_s:
                break
            stale.append(pid)
        for pid in stale:
            self._depart(pid, self._peers.pop(pid), "expired", now)
        horizon = now - HISTORY_S
        while self._departed and self._departed[0].at < horizon:
            self._departed.popleft()

    # ------------------------------------------------------------ queries

    @property
    def participants(self) -> int:
        """How many participants are live (as of the last expiry)."""
        return len(self._peers)

    def next_report_in_s(self, participant_id: str, interval_s: float) -> float | None:
        """Seconds from now to the participant's next report at ``interval_s``, at its phase in the interval
        (``controlplane.report_phase``); None if it is not live."""
        with self._lock:
            slot = self._slots.get(participant_id)
        return None if slot is None else next_report_in_s(slot, interval_s, self._clock())

    def last_seq(self, participant_id: str) -> int:
        """The ``seq`` of the participant's last accepted report (-1: not live)."""
        with self._lock:
            peer = self._peers.get(participant_id)
            return -1 if peer is None else peer.report.seq

    def usage_map(self, keys: Iterable[str]) -> dict[str, dict[str, UsageValues]]:
        with self._lock:
            return self._usage.users_of(keys)

    def missing(self, participant_id: str, keys: Iterable[str]) -> list[str]:
        """The ``keys`` the participant holds no usage under (not live, or never sent in full since)."""
        with self._lock:
            peer = self._peers.get(participant_id)
            held = peer.usage if peer is not None else {}
            return [k for k in keys if k not in held]

    def shared_usage(self) -> dict[str, dict[str, UsageValues]]:
        """Every shared limit any live participant uses: limit key -> participant -> its latest usage and demand."""
        with self._lock:
            self._expire(self._clock())
            return self._usage.everything()

    def snapshot(self) -> Snapshot:
        """The live participants and the recently departed, now (after expiry)."""
        now = self._clock()
        with self._lock:
            self._expire(now)
            return Snapshot(now, sorted(self._peers.items()), list(self._departed))

    def read_live(self, fn: Callable[[list[tuple[Report, dict[str, UsageValues]]]], Any]) -> Any:
        """``fn([(latest report, usage held by limit key)] of every live participant)``, called under the lock
        the listener runs under (metrics.collector reads live reports and its retired totals at one instant)."""
        with self._lock:
            self._expire(self._clock())
            return fn([(peer.report, peer.usage) for _, peer in sorted(self._peers.items())])

    def history(self, level: str | None = None, name: str | None = None, seconds: float = HISTORY_S) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            self._record()
            return self._history.view(now, level, name, seconds)

    def history_steps(self, level: str | None = None, name: str | None = None, seconds: float = HISTORY_S,
                      per_step: int = HISTORY_STEP_LIMITERS) -> Generator[None, None, dict[str, Any]]:
        """``history``, read ``per_step`` limiters at a time under the lock, a pause (None) after each: at 5,000
        limiters the whole view took the lock, and the loop, for 0.3 s."""
        now = self._clock()
        with self._lock:
            self._record()
            keys = self._history.keys(level, name)
        series: list[dict[str, Any]] = []
        for start in range(0, len(keys), per_step):
            yield None
            with self._lock:
                series.extend(self._history.series_of(keys[start:start + per_step], now, seconds))
        with self._lock:
            return {**self._history.frame(seconds), "series": series}
