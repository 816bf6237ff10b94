"""The control plane's short history of every limiter: rates and tokens per report interval, in memory.

How it works
------------
For each limiter (level, kind, name) a ring buffer of 15 minutes at report resolution (one slot per report
interval, by the control plane's clock when the report came). A slot holds, per participant, the rates derived
from the counter deltas between its last two reports (admitted msgs/s and bytes/s, throttle seconds per second,
throttles per second) and its tokens; a slot's value is the sum over participants.

A participant whose report came late (none in a slot, the next one spanning both) has that rate counted in every
slot it spans: summing only the participants that reported in a slot read a skipped slot one participant short, and
the rate over both slots counted once (two participants at 50 msgs/s each read about 93 on average, 80 at times). In
the slot it skipped, its tokens are those of its report before the gap (the level known then).

Slots are as long as the longest interval participants may follow (``reach_slots`` configured intervals:
``controlplane.report_pace`` stretches it under load), on a grid laid from the slot under way whenever that changes.
A participant then reports about once a slot, and one that is silent for 2 of its intervals expires, so a gap spans
at most the slot before. Slots of the configured interval under a stretched one cost the same every second whatever
the interval: each report wrote its value into every slot it had skipped, and every limiter's slot of every second
was summed -- 100 participants of 1,000 limits told 10 s took 34-36 ms of CPU a report where 4 s took 16 (the
control plane's CPU a second unchanged, shared by fewer reports), and a point a second showed one value ten times.
Told 10 s, a report writes one value a limiter and a tenth of the slots are closed: 16-27 ms.

The slots a late report can still reach keep their per-participant values (a late report, and another in the same
slot refining its rate, overwrite the participant's value in the slots before); older ones keep their sums only. A
slot past that reach waits in a queue, and each report closes an eighth of the queue (at least one): the first
report of a new slot would otherwise sum the slot of every limiter it reports (a participant of 1,000 limiters:
1,000 slots of 100 participants; that report took 23 ms to record instead of 7). A slot that ends within
``reach_slots - 1`` configured intervals of now is not shown: participants have yet to report for it. A slot's first
report is measured from the participant's last report of an earlier slot, or, where that one came less than
``MIN_BASE_FRACTION`` of a slot before it (an extra report just before the slot's edge), from the report that slot
was measured from: a rate over a few milliseconds is one send's burst (50 ms holding one send of 25 reads 500
msgs/s). A slot nobody reported in has no point; the next point covers its time (``dashboard.rates`` weighs each
point by the time since the one before).

Not thread-safe: ``controlplane.state.LiveState`` owns one and calls it under its lock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from protocol import Report

__all__ = ["History", "HISTORY_S", "MAX_SERIES", "FIELDS"]

HISTORY_S = 900.0
MAX_SERIES = 5000
MIN_BASE_FRACTION = 0.5   # of an interval: a slot's rates span at least this, where an earlier report allows
CLOSE_SHARE = 8           # a report closes 1 in this many of the slots waiting to be closed (at least one)
FIELDS = ("admittedMsgsPerSecond", "admittedBytesPerSecond", "throttleSecondsPerSecond", "throttledPerSecond",
          "tokensMsgs", "tokensBytes")

Key = tuple[str, str, str]
Totals = tuple[float, float, float, float]   # a limiter's counters: admitted msgs, bytes, throttle s, throttles


@dataclass
class Slot:
    index: int
    values: dict[str, tuple[float, ...]] = field(default_factory=dict)  # participant -> rates and tokens
    sums: tuple[float | None, ...] | None = None  # once closed: per field, the sum over participants (None: none)
    count: int = 0                                # once closed: how many participants it held
    closing: bool = False                         # past the longest gap: waiting in History's queue to be closed

    def totals(self) -> tuple[tuple[float | None, ...], int]:
        """Per field, the sum over participants (None when none had a value), and the number of participants."""
        if self.sums is not None:
            return self.sums, self.count
        # (a field at a time over the participants' tuples; ``x == x`` is false for NaN only)
        sums = tuple(math.fsum(vals) if (vals := [x for x in column if x == x]) else None
                     for column in zip(*self.values.values(), strict=True))
        return sums, len(self.values)

    def close(self) -> None:
        """The slot is past: keep its sums only, so a slot's memory does not grow with the participants (1,000
        participants x 15 minutes of per-participant values would be gigabytes)."""
        if self.sums is None:
            self.sums, self.count = self.totals()
            self.values = {}


_NO_RATES = (math.nan,) * 4
_NO_TOKENS = (math.nan, math.nan)


def _rate(now: float, before: float, dt: float) -> float:
    """A counter's rate over ``dt`` seconds (one that went down was reset: its value is what it counted since)."""
    return (now - before if now >= before else now) / dt


class Seen(NamedTuple):
    """What the history reads of a report: when it was sent, and per limiter its counters' totals and its token
    balances (msgs, bytes; NaN where that dimension has no bucket). A participant's reports of earlier slots are
    kept as this, not whole: a report is mostly what the history never reads again (its usage, the buckets'
    rates and settings, the queues). Kept whole, the one its rates are measured from was a second report per
    participant beside the live one (300 participants of 1,000 limiters, in-process: 2.97 GB resident; kept as
    this, 2.18 GB)."""

    sent_at: float
    totals: dict[Key, Totals]
    tokens: dict[Key, tuple[float, float]]


def _seen(report: Report) -> Seen:
    return Seen(report.sent_at,
                {(c.level, c.kind, c.name): (c.admitted_msgs_total, c.admitted_bytes_total,
                                             c.throttle_time_seconds_total, c.throttled_count)
                 for c in report.counters},
                {(b.level, b.kind, b.name): (b.msgs.tokens if b.msgs else math.nan,
                                             b.bytes.tokens if b.bytes else math.nan)
                 for b in report.buckets})


class History:
    """Per limiter, its slots (see the module essay)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.series: dict[Key, deque[Slot]] = {}
        self._slots = max(1, math.ceil(HISTORY_S / interval_s))
        # per participant, what is read of a report (``Seen``): (slot index, its last report in that slot), and
        # (slot index, the report its rates there are measured from, that report's own slot)
        self._last_in_slot: dict[str, tuple[int, Seen]] = {}
        self._slot_base: dict[str, tuple[int, Seen, int]] = {}
        self._pruned_at: int | None = None   # the slot index of the last prune
        self._closing: deque[Slot] = deque()  # slots no report reaches any more, closed a share a report
        self.reach_slots = 1   # the longest gap a participant may leave between reports, in slots (LiveState's)
        # the grid new slots start on: from _grid_start, every _width base slots (the reach when it was laid)
        self._grid_start = 0
        self._width = 1

    def _slot_of(self, base: int) -> int:
        """The index (first base slot) of the slot that base slot ``base`` falls in; a reach that changed lays a new
        grid from the slot under way."""
        if self.reach_slots != self._width:
            self._grid_start, self._width = self._on_grid(base), self.reach_slots
        return self._on_grid(base)

    def _on_grid(self, base: int) -> int:
        return self._grid_start + (base - self._grid_start) // self._width * self._width

    def forget(self, pid: str) -> None:
        """The participant left: its next report (if it comes back) starts afresh."""
        self._last_in_slot.pop(pid, None)
        self._slot_base.pop(pid, None)

    def record(self, pid: str, cur: Report, now: float) -> None:
        # A slot's rates span from the participant's last report of an earlier slot to its latest report in
        # this one: an extra report within a slot (a job asking for fresh shares) refines the slot's value
        # instead of replacing it with a rate over a few milliseconds, which made the history spiky.
        # The slots between the base report's and this one had no report of the participant: the same rates
        # stand for them (see the module essay).
        base_index = int(now // self.interval_s)
        index = self._slot_of(base_index)
        last = self._last_in_slot.get(pid)
        now_seen = _seen(cur)
        if last is None:  # a participant's first report: later ones in its first slot are measured from it
            self._slot_base[pid] = (index, now_seen, index)
        elif last[0] < index:
            base_seen, old = last[1], self._slot_base.get(pid)
            # An extra report (a task asking for fresh shares) just before the slot's edge, and this one just
            # after it: a rate over those milliseconds is a send's burst, not a rate (the demo's slots read 2.5x
            # the limit while its records read it). Measured from the report the slot before was measured from.
            if old is not None and cur.sent_at - base_seen.sent_at < MIN_BASE_FRACTION * self.interval_s * self._width:
                base_seen = old[1]
            self._slot_base[pid] = (index, base_seen, last[0])
        self._last_in_slot[pid] = (index, now_seen)
        base = self._slot_base.get(pid)
        prev = base[1] if base is not None and base[0] == index else None
        skipped_after = base[2] if base is not None and prev is not None else index
        dt = cur.sent_at - prev.sent_at if prev is not None else 0.0
        before = prev.totals if prev is not None and dt > 0 else {}
        counters, tokens = now_seen.totals, now_seen.tokens
        skipped = skipped_after < index - 1   # (most reports span no slot they skipped: none can lie between)
        held = prev.tokens if prev is not None else {}   # the tokens before the gap, read where a slot was skipped
        oldest_open = base_index - self.reach_slots - self._width + 1   # slots before it no late report reaches
        keys = dict.fromkeys(counters)   # report order: its counters' limiters, then those with tokens only
        keys.update(dict.fromkeys(tokens))
        for key in keys:
            c, p = counters.get(key), before.get(key)
            if c is not None and p is not None:
                rates = (_rate(c[0], p[0], dt), _rate(c[1], p[1], dt), _rate(c[2], p[2], dt), _rate(c[3], p[3], dt))
            else:
                rates = _NO_RATES
            series = self.series.get(key)
            if series is None:
                if len(self.series) >= MAX_SERIES and self._pruned_at != index:
                    self._prune(index)
                if len(self.series) >= MAX_SERIES:
                    continue
                series = self.series[key] = deque(maxlen=self._slots)
            if not series or series[-1].index < index:
                for s in reversed(series):   # no late report reaches back further than the longest gap
                    if s.sums is not None or s.closing:
                        break
                    if s.index < oldest_open:
                        s.closing = True
                        self._closing.append(s)
                series.append(Slot(index))
            slot = series[-1]
            if slot.index > index:   # (the clock stepped back)
                slot = next((s for s in reversed(series) if s.index <= index), slot)
            if slot.sums is None:  # (a closed slot is only ever picked when the clock stepped back)
                slot.values[pid] = rates + tokens.get(key, _NO_TOKENS)
            if not skipped:
                continue
            skipped_value = None
            for s in reversed(series):   # the slots it skipped
                if s.index <= skipped_after:
                    break
                if s.index < index and s.sums is None:
                    if skipped_value is None:
                        skipped_value = rates + held.get(key, _NO_TOKENS)
                    s.values[pid] = skipped_value
        for _ in range((len(self._closing) + CLOSE_SHARE - 1) // CLOSE_SHARE):
            self._closing.popleft().close()

    def _prune(self, index: int) -> None:
        """Forget limiters with no point in the history window (bounded memory: at most MAX_SERIES series). Once
        a slot: what it could not free now it cannot free again before the slot moves on (a full history, with
        one pass for each new limiter, cost a report of 5,000 new limiters 25 million look-ups, a second)."""
        self._pruned_at = index
        for key in [k for k, s in self.series.items() if not s or s[-1].index < index - self._slots]:
            del self.series[key]

    def view(self, now: float, level: str | None, name: str | None, seconds: float) -> dict[str, Any]:
        """The points of the last ``seconds``, per limiter (of ``level`` and ``name`` when given)."""
        return {**self.frame(seconds), "series": self.series_of(self.keys(level, name), now, seconds)}

    def keys(self, level: str | None, name: str | None) -> list[Key]:
        """The limiters with a series (of ``level`` and ``name`` when given), sorted."""
        return sorted(k for k in self.series if (level is None or k[0] == level) and (name is None or k[2] == name))

    def frame(self, seconds: float) -> dict[str, float]:
        # (the slots' length now: what a point of the series covers, and what live rates average over several of)
        return {"intervalSeconds": self.interval_s * self._width, "windowSeconds": seconds}

    def series_of(self, keys: list[Key], now: float, seconds: float) -> list[dict[str, Any]]:
        """The points of the last ``seconds`` of each of ``keys`` that has any (a view read a step at a time)."""
        first = int((now - seconds) // self.interval_s)
        last = int(now // self.interval_s) - (self.reach_slots - 1)   # (newer ones: not everyone reported yet)
        series = []
        for key in keys:
            lv, kind, nm = key
            points = []
            for s in self.series.get(key, ()):
                end = s.index + (self._width if s.index >= self._grid_start else 1) - 1   # its last base slot
                if end < first or end > last:
                    continue
                point: dict[str, Any] = {"t": s.index * self.interval_s}
                sums, count = s.totals()
                for i, f in enumerate(FIELDS):
                    point[f] = sums[i] if i < len(sums) else None
                point["participants"] = count
                points.append(point)
            if points:
                series.append({"level": lv, "kind": kind, "name": nm, "points": points})
        return series
