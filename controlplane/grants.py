"""The control plane's grants: every shared limit's ``limiter.grants.GrantWindow``s, and what they answer.

How it works and why
--------------------
For each shared limit a participant asks about (``limit_key(level, direction, name)``) the book keeps two grant
windows, messages and bytes. The limit is read from the current policies through ``protocol.rules`` -- the
reading participants use for their own limiters -- so a live change is in the very next answer: a cut holds
as soon as the last window's grants have slid out (one period), a raise is there at once. The window is the
limit's period (``ratePeriodInSecond``; resource groups: 1 s), its capacity the limit per period. A limit that
is not set, or not shared, answers -1 (unlimited).

The fair chunk of one ask is ``limit * chunk_s / askers``, where ``askers`` counts the participants that asked in
the window and ``chunk_s = max(CHUNK_S, askers / pace)`` (with the ``proportional`` strategy, Pulsar's, ``limit *
chunk_s`` times the asker's fraction of what was granted in the window instead): each asker gets a quarter-second's
worth of its fair share per ask, so a participant sending steadily below the limit asks about 4-6 times a second;
while the limit binds, an answer short of the ask says to come back after ``max(RETRY_MIN_S, askers / pace)``, and
the limit's asks stay near ``pace`` however many participants share it (measured on Spark: 21-38 grant requests a
second for each of two to four workers while the limit binds, 5.2-5.7 at 60 % of it). A micro-batch worker's
(``GrantWindow.returning``) share is among the stream's micro-batch workers (``micro_batch_workers``), not this
window's askers alone -- a stream whose period is longer than a window finds none of them in it at a micro-batch's
start, and its first askers were told chunks of 125-250 for tasks of 62 -- and one that says the send its
producers make gets ``SENDS_A_CHUNK`` (3) of those sends an ask if that is more, within that share of the whole
window: sixteen of them, fair chunks of 15.6 for sends of 25, drew a task of 62 in four or five asks, and where
Spark's gaps stretched to 0.4-0.6 s the micro-batch drew the window's room so late that its end, and the next gap,
came after the window had slid (simulated: 0.947 of the limit; 0.988 so). One whose producers say a batch in hand
(``GrantAsk.coming_msgs``, ``Producer.will_send``) is granted that and its debt in one answer, within its share, and
no more; every micro-batch worker is told its share as its chunk, which its next task's first ask wants (that ask
goes out before its batch is in hand). Three sends a chunk, a task's last send of 12 on a debt of 9 drew 36 where it
needed 21; finished tasks held the rest until their keepers, starved of the CPU by the running tasks, gave it back
0.3-0.5 s later, and the next task's first ask wanted 36 for a task of 62 (simulated so, keepers 0.1-0.3 s late
while the tasks run, gaps of 0.5-0.8 s: 0.656 of the limit before, 0.878 with both). ``pace`` is
``MAX_ASKS_PER_S``, or the limit's part of this process's budget of asks when more than 20 limits are busy (at the
default budget) (``controlplane.ask_pace``: 50 limits of 20 participants at their ceilings drew 5,000 asks a second,
more than a core answers), but never fewer than ``ASKS_A_PERIOD`` (2) a period from each asker. A limit is stretched
when its pace is the budget's part, or when its askers come further apart than ``SHORT_SPENT_S`` of the window (more
than five at ``MAX_ASKS_PER_S``; with the rules below, 20 and 64 participants of one limit at its ceiling used it
0.998 and 0.98, where they had used it 0.93 and 0.76). Such a limit's asks come a whole part of the period apart (so
that the askers' cycles tile the window), its chunks last one spacing, a holder's bucket holds two, so that what an
answer that came late or short missed the next ones make up (``asks_apart_s`` in ``GrantWindow.grant``: a window
spent for no longer than a spacing does not pause it either), and an adaptive limit is never stretched (its holders
hold a tenth of a second, as its sink refuses bursts). An asker of a stretched limit held back is told to come back
at its own moment of the spacing (a phase from its name), so that the process's asks stay spread over time whenever
its participants started (``_own_moment_in_s``). The answer says the spacing (``Grant.asks_apart_s``), and a
participant says its spends no more often. A micro-batch worker (``GrantWindow.returning``) held back by a spent
window that frees a chunk sooner (by what was granted, and by what was spent) is told to come back then instead (not
sooner than ``EARLY_RETRY`` of that wait, so its asks stay within four times the steady rate): its catch-up sliding
out of the window is granted again at once, not at the phase of its next ask against that moment. One that says its
send (``GrantAsk.send_msgs``) and is alone or short of its fair share is told when room for one send frees: that is
what its waiting producer needs.

``safe`` is the fallback rate a participant uses while it cannot reach the control plane: the limit divided by
the participants that asked in the last five windows and did not say goodbye (``GrantWindow.holders``: a
static split, so the limit is held while nobody can re-divide it; a worker that left the limit at the end of its
micro-batch still counts, as it is back for the next one). Not by the askers of the last window alone: a
Spark stream's workers each sit out a micro-batch now and then, and a split by whoever asked in the last second
let four workers of a 1,000 msgs/s limit run at 1,440 between them through an outage.

Learning mode: a restarted control plane's windows are empty, while the participants out there still spend
the old process's grants or their fallback rates. If the marker file (``grants.alive`` in the data directory,
touched while anyone asks) is younger than ``MARKER_STALE_S`` at start-up, the book answers in learning mode for
``learning_s``: a participant is paced at no more than the fallback rate it reports (``safe_*``), without a first
burst, and the fallback rate answered stays that, so the total stays within the limit until everyone has been
heard from. One that reports none (a worker that started during the outage) gets the limit split between
the participants heard so far and itself (at least two), as its own outage rule would. ``learning_s`` covers the
participants' longest retry backoff (10 intervals, at most 30 s) plus two intervals. A fresh data directory
starts without learning. The marker may be old: a participant runs at its fallback rate for as long as the
outage lasts, and a restart itself can take seconds on a loaded machine (a marker only ``learning_s`` old missed
the participants of a 1.5-s outage, which then took 700 msgs/s each of a 1,000 limit for most of a second).
Learning needlessly costs a newcomer half the limit for ``learning_s``; so only a marker untouched for a day is
taken for a platform whose jobs are gone.

Where the windows live (``controlplane.grant_tables``): in this process by default; with ``--redis-url``, in
Redis, so that several replicas answer as this one book would (each answer runs on the limits it reads, in one
optimistic transaction, and again on fresh copies if another replica wrote them meanwhile). Learning is then
the whole platform's: a Redis that comes back empty has lost every window, and the first replica to notice sets
the learning time for all (from its marker, as above).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from controlplane.adaptive import AdaptiveLimit
from controlplane.ask_lag import AskLag
from controlplane.ask_pace import ASKS_BUDGET_PER_S, AskPace
from controlplane.grant_tables import GrantTable, MemoryTable
from limiter.grants import DEFAULT_BURST_S, SHORT_SPENT_S, GrantWindow
from limiter.policy import Level, Rate
from protocol import MAX_ASKS_PER_S, Grant, GrantAsk, Limit, PolicySet, PolicyView, limit_key, parse_limit_key

__all__ = ["GrantBook", "CHUNK_S", "MAX_ASKS_PER_S", "MARKER", "MARKER_STALE_S", "learning_s_for"]

CHUNK_S = 0.25
# the soonest an answer short of its ask says to come back, where the limit's pace allows it (one asker at
# MAX_ASKS_PER_S; two or more are spaced by the pace): a task alone at a micro-batch's end, paced by its answers, gets
# what came free since its last, and the room between two answers is the limit's loss. At 20 ms, on a stream of
# 10,000 a second, answers of 200 left a sawtooth of room averaging 1 % of the limit while one task ran; at 10 ms the
# stream read 0.9977-0.9981 of its limit against 0.9967-0.9974, for 7 % more asks
RETRY_MIN_S = 0.01
# of the retry: the soonest an answer held back by a spent window says to come back when the window frees a chunk
# sooner (the limit's asks then stay within 1 / EARLY_RETRY of MAX_ASKS_PER_S)
EARLY_RETRY = 0.25
# a stretched limit's asks: at least this many a period from each busy participant. Once a period, one whose ask came
# a moment early found its own last grant still in the window, and was refused for a whole period (0.5-0.6 of the
# limit used, in tests/collectors' simulation of 20 participants a limit)
ASKS_A_PERIOD = 2
OWN_MOMENT_LAG = 0.005   # a stretched limit's asker's cycle: longer than its spacing by this part of it
FREED_LEAD_S = 0.001   # past the moment the window frees: the ask that comes then finds it slid
# a micro-batch worker's chunk: this many of the sends its producers make, within its share of the window (16 workers,
# gaps of 0.4-0.6 s, simulated: 0.947 of the limit with fair chunks alone, 0.986 with this)
SENDS_A_CHUNK = 3
ADAPTIVE_BURST_S = 0.1     # an adaptive limit's holders hold this much of their fair rate
MARKER = "grants.alive"
MARKER_STALE_S = 24 * 3600.0   # a marker older than this: no participant of then is assumed to be still sending


def learning_s_for(interval_s: float) -> float:
    """How long a restarted control plane re-learns: the participants' longest backoff plus two intervals."""
    return min(30.0, max(1.0, 10 * interval_s)) + 2 * interval_s


class _Limit:
    __slots__ = ("msgs", "bytes", "adaptive")

    def __init__(self, window_s: float):
        self.msgs = GrantWindow(window_s)
        self.bytes = GrantWindow(window_s)
        self.adaptive: AdaptiveLimit | None = None   # an adaptive limit's rate (its messages dimension)

    def smooth(self, on: bool) -> None:
        """An adaptive limit's grants come smoothly (``ADAPTIVE_BURST_S``, no catch-up after a gap nor any refill
        while away): the sink behind it refuses a burst whatever the rate, and each refusal cuts the rate. Set on
        the windows in place: new windows would forget the grants of the last one, and a mode switched live would
        grant it twice."""
        for window in (self.msgs, self.bytes):
            window.burst_s = min(ADAPTIVE_BURST_S, window.window_s) if on else DEFAULT_BURST_S
            window.catch_up = not on

    def adapt(self, limit: Limit, rate: Rate, ask: GrantAsk, now: float) -> tuple[float, float]:
        """(messages capacity per period, seconds the sink asked to pause): an adaptive limit's after learning
        from ``ask``'s outcomes (``controlplane.adaptive``); the configured capacity and no pause for any other."""
        floor_per_s = limit.adaptive_floor_per_s
        if floor_per_s is None or not rate.msgs_limited:
            self.adaptive = None
            return (rate.msgs if rate.msgs_limited else -1.0), 0.0
        if self.adaptive is None:
            self.adaptive = AdaptiveLimit(rate.msgs / rate.period_s, floor_per_s, now)
        if ask.wants_msgs > 0:
            self.adaptive.rate.busy(now)   # (a sender back after every one had stopped)
        return self.adaptive.learn(rate, floor_per_s, limit.adaptive_slow_s, ask, now)

    def answered(self, now: float) -> None:
        """After an ask's answer: if no holder asks any more (the last gave back: Spark's pause between two
        micro-batches), an adaptive limit's sink is not asked until one does, and its reading leaves that out."""
        if self.adaptive is not None and self.msgs.askers(now) == 0:
            self.adaptive.rate.idle(now)


class GrantBook:
    """Every grant the control plane made in the last window of each shared limit (see the module essay).
    Thread-safe."""

    def __init__(self, interval_s: float, data_dir: Path | None = None, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 learning_s: float | None = None, table: GrantTable | None = None,
                 asks_budget_per_s: float = ASKS_BUDGET_PER_S):
        self.interval_s = interval_s
        self.pace = AskPace(asks_budget_per_s)   # how often each busy limit is to be asked
        self.lag = AskLag()   # how late each participant's asks arrive (its spends are dated by its own clock)
        self._clock, self._wall = clock, wall
        # where the windows live: here, or in Redis for replicas (controlplane.grant_tables; its clock is then
        # the wall clock, which every replica shares)
        self._table: GrantTable = table if table is not None else MemoryTable()
        self._view: PolicyView | None = None
        self._view_lock = threading.Lock()
        self._marker = None if data_dir is None else Path(data_dir) / MARKER
        self._touched_at = -math.inf
        self._learning_s = learning_s_for(interval_s) if learning_s is None else learning_s
        self.learning_until = self._fresh_learning_until()

    def _fresh_learning_until(self) -> float:
        """Learn from now on if participants of before may still be out there (the marker is recent)."""
        if self._marker is None or self._learning_s <= 0:
            return -math.inf
        try:
            age = self._wall() - self._marker.stat().st_mtime
        except OSError:
            return -math.inf
        return self._clock() + self._learning_s if age < MARKER_STALE_S else -math.inf

    @property
    def learning(self) -> bool:
        return self._clock() < self.learning_until

    def _policy_view(self, policies: PolicySet) -> PolicyView:
        with self._view_lock:
            view = self._view
            if view is None or view.version != policies.version:
                view = self._view = PolicyView(policies)
            return view

    def _edit(self, keys: Iterable[str], fn: Callable[[dict[str, _Limit], bool], Any]) -> Any:
        """``fn(limits, learning)`` on the limits of ``keys``, learning by the shared store's epoch if it has one."""
        def run(limits: dict[str, _Limit], shared_learning_until: float | None) -> Any:
            if shared_learning_until is not None:
                self.learning_until = shared_learning_until
            return fn(limits, self._clock() < self.learning_until)

        return self._table.edit(keys, run, self._fresh_learning_until)[0]

    def answer(self, participant_id: str, asks: Iterable[GrantAsk], policies: PolicySet,
               sent_s: float | None = None) -> list[Grant]:
        """One grant per ask, in order. ``sent_s``: the participant's clock when it measured its spends' ``ago_s``
        (``controlplane.ask_lag``: they are dated by it, not by when the asks arrived)."""
        view = self._policy_view(policies)
        asks = list(asks)
        keys = [limit_key(ask.level, ask.direction, ask.name) for ask in asks]

        now = self._clock()
        # (once per request: the edit below runs again on fresh copies when another replica wrote meanwhile)
        late_s = self.lag.excess_s(participant_id, sent_s, now)
        for key, ask in zip(keys, asks, strict=True):
            if ask.wants_msgs > 0 or ask.wants_bytes > 0:
                self.pace.asked(key, now)
        per_limit_per_s = self.pace.per_limit_per_s(now)

        def answer_all(limits: dict[str, _Limit], learning: bool) -> list[Grant]:
            at = self._clock()
            # (plus any wait for the windows since it arrived: its spends keep the dates its own clock gave them; an
            # ask that does not say when it was sent is dated from now, as before)
            late_here = late_s + (at - now) if sent_s is not None else 0.0
            return [self._answer_one(limits, key, view, participant_id, ask, at, learning, per_limit_per_s, late_here)
                    for key, ask in zip(keys, asks, strict=True)]

        out = self._edit(keys, answer_all)
        self._touch(self._clock(), any(g.msgs >= 0 or g.bytes >= 0 for g in out))
        return out

    @staticmethod
    def _answer_one(limits: dict[str, _Limit], key: str, view: PolicyView, participant_id: str, ask: GrantAsk,
                    now: float, learning: bool, per_limit_per_s: float, late_s: float = 0.0) -> Grant:
        limit = view.limit(Level(ask.level), ask.direction, ask.name)
        rate = limit.rate
        if not limit.shared or rate.is_unlimited:
            limits.pop(key, None)
            return Grant(level=ask.level, name=ask.name, direction=ask.direction)
        windows = limits.get(key)
        if windows is None or windows.msgs.window_s != rate.period_s:
            windows = limits[key] = _Limit(rate.period_s)
        windows.smooth(limit.adaptive_floor_per_s is not None)
        proportional = limit.strategy.value == "proportional"
        # an ask that wants nothing at all says the participant is done with the limit for now
        leaving = ask.wants_msgs <= 0 and ask.wants_bytes <= 0
        msgs_capacity, pause_s = windows.adapt(limit, rate, ask, now)
        if pause_s > 0:   # the sink asked for a pause: nothing for anyone until then (what it says is kept)
            ask = ask.model_copy(update={"wants_msgs": 0.0, "wants_bytes": 0.0})
        adaptive = limit.adaptive_floor_per_s is not None
        if adaptive:
            # (asked at the full pace and never stretched: its holders hold a tenth of a second, as its sink refuses
            # bursts; asked less often, they would take less than their shares)
            per_limit_per_s = MAX_ASKS_PER_S
        m = _one(windows.msgs, participant_id, msgs_capacity, rate.period_s, ask, "msgs", now, learning,
                 proportional, per_limit_per_s, leaving, spacing=not adaptive, late_s=late_s)
        b = _one(windows.bytes, participant_id, rate.bytes if rate.bytes_limited else -1, rate.period_s, ask,
                 "bytes", now, learning, proportional, per_limit_per_s, leaving, spacing=not adaptive, late_s=late_s)
        windows.answered(now)
        return Grant(level=ask.level, name=ask.name, direction=ask.direction,
                     msgs=m[0], chunk_msgs=m[1], safe_msgs_per_s=m[2], retry_s=max(m[3], b[3], pause_s),
                     bytes=b[0], chunk_bytes=b[1], safe_bytes_per_s=b[2], fair_msgs_per_s=m[4],
                     fair_bytes_per_s=b[4], pause_s=pause_s, asks_apart_s=max(m[5], b[5]),
                     holders=max(windows.msgs.holders(now), windows.bytes.holders(now)))

    def _touch(self, now: float, asked: bool) -> None:
        if self._marker is None or now - self._touched_at < self.interval_s or not asked:
            return
        self._touched_at = now
        # (a clean stop keeps it too: the participants go on spending their grants and fallback rates after it)
        with contextlib.suppress(OSError):   # a read-only data directory costs the learning mode, nothing else
            self._marker.touch()

    def adaptive_trace(self) -> dict[str, list[dict[str, float]]]:
        """Per adaptive limit, its trace (``controlplane.adaptive``: a point a second while anyone asks)."""
        now, wall = self._clock(), self._wall()
        return self._table.read(lambda limits: {key: w.adaptive.trace(now, wall) for key, w in sorted(limits.items())
                                                if w.adaptive is not None})

    def goodbye(self, participant_id: str) -> None:
        """``participant_id`` left for good (its process ends): no longer counted by any limit's safe split."""
        def leave(limits: dict[str, _Limit]) -> None:
            for windows in limits.values():
                windows.msgs.leave(participant_id)
                windows.bytes.leave(participant_id)

        self._table.edit_all(leave, self._fresh_learning_until)

    def ask_pace(self) -> dict[str, float]:
        """This process's budget of grant asks now (``controlplane.ask_pace``): the limits asked for tokens in the
        last second, the asks a second each is to draw, and the budget."""
        now = self._clock()
        return {"busyLimits": self.pace.active(now), "asksPerLimitPerSecond": self.pace.per_limit_per_s(now),
                "budgetPerSecond": self.pace.budget_per_s}

    def ask_delays(self) -> tuple[list[tuple[float, int]], float]:
        """How much later than each participant's quickest its grant asks arrived (``controlplane.ask_lag``), as a
        histogram: cumulative ``[(upper bound, asks), ...]`` (the last bound ``inf``) and the sum, in seconds."""
        return self.lag.delays()

    def view(self) -> dict[str, Any]:
        """Per shared limit: tokens granted in the last window and how many participants asked."""
        now = self._clock()
        limits = self._table.read(lambda book: {
            key: {"grantedMsgs": w.msgs.granted(now), "grantedBytes": w.bytes.granted(now),
                  "askers": max(w.msgs.askers(now), w.bytes.askers(now)), "windowSeconds": w.msgs.window_s}
            for key, w in sorted(book.items())})
        return {"learning": now < self.learning_until, "limits": limits}

    def limit_keys(self) -> list[str]:
        """Every limit the book holds a window of, sorted."""
        return self._table.keys()

    def shares(self, holders: dict[str, Iterable[str]], policies: PolicySet,
               keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Read-only, for every shared limit in ``holders`` (limit key -> the participants to look up) and every one in
        the book -- or for those of ``keys`` only, when given (a view reads the book a few limits at a time,
        ``controlplane.views``): its limit per second per dimension (None: unlimited, or not a shared limit), the
        window, the tokens granted in it, how many asked, and per participant looked up what it was granted in the
        window and its max-min fair rate by the wanted rates (0 when it did not ask in the window; None when
        unlimited). A limit nobody asked about has no window (``windowSeconds`` None), nor any share."""
        view = self._policy_view(policies)
        now = self._clock()
        wanted = None if keys is None else sorted(keys)

        def read(limits: dict[str, _Limit]) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            for key in sorted({*holders, *limits}) if wanted is None else wanted:
                level, direction, name = parse_limit_key(key)
                try:
                    limit = view.limit(Level(level), direction, name)
                except ValueError:   # not a level: nothing is configured there
                    limit = None
                rate = limit.rate if limit is not None and limit.shared else None
                windows = limits.get(key)
                entry: dict[str, Any] = {"windowSeconds": None if windows is None else windows.msgs.window_s,
                                         "askers": 0 if windows is None else
                                         max(windows.msgs.askers(now), windows.bytes.askers(now)),
                                         "holders": {}}
                adaptive = None if windows is None or limit is None or limit.adaptive_floor_per_s is None \
                    else windows.adaptive
                entry["adaptive"] = None if adaptive is None else adaptive.view(now)
                dims = (("msgs", rate is not None and rate.msgs_limited, None if rate is None else rate.msgs),
                        ("bytes", rate is not None and rate.bytes_limited, None if rate is None else rate.bytes))
                for dim, limited, per_period in dims:
                    per_s = per_period / rate.period_s if limited and rate is not None else None
                    if dim == "msgs" and per_s is not None and adaptive is not None:   # what it holds now
                        per_s = min(per_s, adaptive.per_s(now))
                    window = None if windows is None else getattr(windows, dim)
                    entry[dim] = {"limitPerSecond": per_s,
                                  "granted": None if per_s is None or window is None else window.granted(now)}
                    for pid in holders.get(key, ()):
                        got = entry["holders"].setdefault(pid, {})
                        if per_s is None or window is None:
                            got[dim] = {"granted": None, "fairPerSecond": None}
                        else:
                            asked = window.askers(now) > 0 and window.asked(pid)
                            got[dim] = {"granted": window.granted_to(pid, now),
                                        "fairPerSecond": window.fair_rate(pid, per_s, now) if asked else 0.0}
                out[key] = entry
            return out

        return self._table.read(read, wanted)


def _own_moment_in_s(holder: str, apart_s: float, now: float) -> float:
    """How long until ``holder``'s own moment of its stretched limit's cycles (its phase in them from a hash of its
    name), at least half a cycle from ``now``: the askers of many busy limits come back spread over the spacing,
    however close together they started. Told to come back one spacing after each answer, they kept the phases of
    their start: 1,000 that started within a quarter-second asked in bursts of 4,000 a second for 0.35 s of every
    0.5 s and none in between, and the reports of the same process waited up to 49 ms (p99 17-41 ms; spread: 4-19).
    A cycle is longer than the spacing by ``OWN_MOMENT_LAG`` of it: each ask reaches the book after the answer's way
    back and its own way in, and asked exactly one spacing apart, one whose ways were quicker than those of the ask
    two cycles before found its own grant of a period ago still in the window (at 0.5 s: 0.973 of each limit used,
    0.995 with the lag). A longer lag costs the limit as much: 2 or 5 % of the spacing, 2 or 5 points; so did 2.5 ms
    at a spacing of 0.05 s (one asker a limit, simulated: 0.94)."""
    cycle_s = apart_s * (1 + OWN_MOMENT_LAG)
    phase_s = zlib.crc32(holder.encode()) / 2**32 * cycle_s
    wait_s = (phase_s - now) % cycle_s
    return wait_s + cycle_s if wait_s < cycle_s / 2 else wait_s


def _one(window: GrantWindow, holder: str, capacity: float, period_s: float, ask: GrantAsk, dim: str, now: float,
         learning: bool, proportional: bool, per_limit_per_s: float, leaving: bool = False, spacing: bool = True,
         late_s: float = 0.0) -> tuple[float, float, float, float, float, float]:
    """(granted, fair chunk, safe rate per second, retry_s, fair rate per second, seconds between its asks) for
    dimension ``dim`` ("msgs" or "bytes") of ``ask``; -1s (and 0 s) when it is unlimited. ``per_limit_per_s``:
    the asks a second the limit is to draw (``controlplane.ask_pace``); ``spacing``: whether its asks may be
    stretched (not an adaptive limit's); ``late_s``: how much later than its participant's quickest this ask
    arrived (its spends were that much earlier than ``now - ago_s``: ``controlplane.ask_lag``)."""
    if capacity <= 0:
        return -1.0, -1.0, -1.0, 0.0, -1.0, 0.0
    wants, rate_per_s = getattr(ask, f"wants_{dim}"), getattr(ask, f"rate_{dim}_per_s")
    returns, safe_was_per_s = getattr(ask, f"returns_{dim}"), getattr(ask, f"safe_{dim}_per_s")
    held = getattr(ask, f"held_{dim}")
    if held is not None:   # it says what it holds and spent: its grants count until spent (limiter.grants)
        # a pool holds at most the limit, and spends at most that between two asks: a report of more (a bug, a
        # limit cut a moment ago) counts as that much, so one report cannot shut the others out for long
        spent, room = [], capacity
        for s in ask.spent:
            amount = min(room, getattr(s, dim))
            room -= amount
            spent.append((now - late_s - s.ago_s, amount))
        window.report(holder, min(held, capacity), spent, now)
    # counted before a give-back too: the answer to one is the last a participant may get before an outage (a
    # stream's worker gives back at the end of every micro-batch), and its fallback must still count the giver.
    # ``holders`` after the give-back counts it as well (it stays among the recent holders); the two differ only
    # while an asker of the window that already said goodbye is still counted among the askers
    holders_before = window.holders(now)
    if returns > 0 or leaving:   # (no longer an asker: its fair share goes to the others at once)
        # (it still counts for the safe split: a stream's worker leaves at the end of each micro-batch and is back
        # for the next, and a split without it would let the other run at the whole limit through an outage while
        # it comes back at its part -- measured, 1.4x the limit; only a goodbye stops it counting)
        window.give_back(holder, returns, now)

    def safe_per_s() -> float:
        # while re-learning, not everyone has been heard from: the fallback rate a participant brought along
        # stays its cap (answering the limit / the few heard so far would raise it with every answer)
        split = capacity / period_s / max(1, window.holders(now), holders_before)
        return min(split, safe_was_per_s) if learning and safe_was_per_s > 0 else split

    if wants <= 0:
        # a micro-batch worker leaving in debt (its task's last send overdrew its pool) is granted it now, room or
        # not: those sends were made, and granted with its next task, a micro-batch later, the window counted them
        # late (``GrantWindow.repay``). A batch job's worker is back with its next task within milliseconds, and
        # its first ask repays it then (repaid at each of 64 short tasks' ends, they read 0.98 and 0.99 of the
        # limit in two runs, 0.995 and 0.996 without)
        repaid = window.repay(holder, -held, capacity, now) if leaving and held is not None and held < 0 and \
            not learning and window.returning(holder, now) else 0.0
        return repaid, 0.0, safe_per_s(), 0.0, 0.0, 0.0
    askers = max(1, window.askers(now) + (not window.asked(holder)))
    # the asks a second the limit is to draw: its part of the process's budget, but each busy participant asks
    # ASKS_A_PERIOD times a period at the least (up to MAX_ASKS_PER_S: a limit shared by more is asked that often)
    pace_per_s = max(per_limit_per_s, min(MAX_ASKS_PER_S, ASKS_A_PERIOD * askers / period_s))
    apart_s = askers / pace_per_s   # how far apart each asker's asks come
    # stretched: by the budget shared between many busy limits (controlplane.ask_pace), or by many askers of this
    # one, whose asks come further apart than a spent window's short span (SHORT_SPENT_S of it): their buckets of
    # burst_s ran dry between asks, and every full window paused them (the module essay). Two to five askers at
    # MAX_ASKS_PER_S are not: a stream's workers
    stretched = spacing and (pace_per_s < MAX_ASKS_PER_S or apart_s > SHORT_SPENT_S * period_s)
    if stretched:
        # a whole part of the period, so that the holders' cycles tile the window: 0.4 s in a 1-s window
        # alternates two and three cycles a window, and one full at each third held 0.8 of the limit (1/3: 0.98).
        # The next shorter one: up to one ask a second more from each asker (32 askers of a limit at 100 a second
        # ask every 0.25 s). The next longer one kept the limit's asks at its pace, but in the load benchmark (50
        # limits of 20, 0.5 s apart) answers waited longer, for a reason not found: p99 of 16-136 ms in four runs
        # against 6-14 ms in two (that row swings with the host: 25-84 ms in another hour, either code)
        apart_s = period_s / math.ceil(period_s / apart_s - 1e-9)
    # (a stretched limit's chunk lasts one spacing, and its holders' buckets hold two: what an answer that came late
    # or short missed, the next ones make up. Chunks of two spacings read no better: 0.973 and 0.982 of each limit
    # in the load benchmark's 50 limits of 20, against 0.986 twice)
    chunk_s = max(CHUNK_S, apart_s)
    share = 1 / askers
    total = window.granted(now)
    if proportional and total > 0:   # Pulsar's: everyone keeps its fraction of what was granted in the window
        rate_per_s = min(rate_per_s, capacity / period_s * max(window.granted_to(holder, now) / total, 1 / capacity))
        share = rate_per_s * period_s / capacity
    micro_batch = window.returning(holder, now)
    if micro_batch:
        # a micro-batch worker's share is among the stream's workers, not this window's askers alone: a stream whose
        # period is longer than a window finds none of them in it at a micro-batch's start, and its first askers
        # took 125-250 each for tasks of 62 -- held until their tasks ended, while the last tasks waited
        share = min(share, 1 / max(1, window.micro_batch_workers(now)))
    chunk = capacity * min(1.0, chunk_s / period_s) * share
    most = chunk   # what this answer grants at most
    send, coming = (ask.send_msgs, ask.coming_msgs) if dim == "msgs" else (0.0, None)
    if micro_batch:
        whole = capacity * share
        if send > 0:
            # it draws its catch-up SENDS_A_CHUNK sends an ask, within its share of the window: with sixteen workers
            # a fair chunk is 15.6 for sends of 25, a task of 62 took four or five asks, and where Spark's gaps
            # stretch (a busy host, a slow commit) the window's room at each micro-batch's start was drawn late
            most = max(chunk, min(SENDS_A_CHUNK * send, whole))
        need = (coming or 0.0) - (held or 0.0)   # (``held`` after its give-back; negative: a debt)
        if coming and need > 0:
            # its producers have a batch in hand (a task's rows in one Arrow batch, cut into sends): that and its
            # debt in one answer, within its share, and no more. Three sends a chunk, a task's last send of 12 on a
            # debt of 9 drew 36 where it needed 21, and finished tasks held the rest until their keepers, starved of
            # the CPU by the running tasks, gave it back 0.3-0.5 s after the tasks' end, while the micro-batch's last
            # sends waited. (A batch of one send says nothing: ``collectors.spark``)
            most = min(whole, need)
        # told back its share: the next task's first ask comes before its batch is in hand (``Participant.producer``)
        chunk = max(most, whole)
    cap = None
    if learning:   # what it brought along; a participant that brings none: a static split, itself included
        was = safe_was_per_s if safe_was_per_s > 0 else capacity / period_s / max(2, askers)
        cap = was * period_s
    granted = window.grant(holder, wants, capacity, now, fair_chunk=most, rate_per_s=rate_per_s or None,
                           learning_cap=cap, fell_back=ask.fell_back,
                           asks_apart_s=apart_s if stretched else 0.0,
                           send=send, balance=held, coming=coming)
    askers = max(1, window.askers(now))
    fair_per_s = window.fair_rate(holder, capacity / period_s, now)
    retry = 0.0
    if granted < wants:
        # short of the want: ask again soon (the buckets refill continuously, and what others give back is free at
        # once), but the asks of one limit stay near its pace however many wait
        retry = max(RETRY_MIN_S, askers / pace_per_s) if not stretched else _own_moment_in_s(holder, apart_s, now)
        # a micro-batch worker held back by the window, which frees a chunk's worth (or one of its sends) sooner
        # than that (a catch-up sliding out, by the grants' bound and the spends'): come back then. A poll's phase
        # against that moment cost a stream a share of it every window. (Not a steady holder: its asks at their own
        # phases fill the window as it frees, and sooner asks moved the shares of a steady group -- the others took
        # 7-11 intervals to share a leaver's, not 6)
        if window.returning(holder, now):   # (asked first: the window's log is read only for such a worker)
            # when room for one of its sends frees, if it says its send and is alone or short of its fair share of
            # the window: a send is what its waiting producer needs, and told the moment a whole chunk fits, it came
            # back a poll later while a lump sliding out freed room sooner (at 10,000 a second, room of a few hundred
            # sat unused for 9-13 ms some five times a second; told the send's moment, the stream read 0.9988-0.9996
            # of its limit against 0.9969-0.9978, for 9 % more asks). Any worker so, a greedy stream beside a trickle
            # turned greedy took the room as it freed: the newcomer 464 a second of 1,000 where it had 499
            behind = send > 0 and (askers <= 1 or window.granted_to(holder, now) < fair_per_s * period_s)
            frees_s = window.frees_s(holder, capacity, now,
                                     pending=min(wants - granted, most, send if behind else most))
            if frees_s > 0:
                retry = min(retry, max(frees_s + FREED_LEAD_S, retry * EARLY_RETRY))
    return granted, chunk, safe_per_s(), retry, fair_per_s, apart_s
