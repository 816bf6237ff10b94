"""Adaptive rates: one limit that learns what the sink behind it can take, from the sink's own answers.

Why
---
The limit an operator types is a guess of what a downstream system can take. The system says it itself: an HTTP
API answers 429 (or 503) with ``Retry-After`` when it is overrun, a database's latency climbs. A Spark job whose
tasks each react alone backs off in one task while the others keep overrunning the sink; AIMD per client (AWS
SDKs' adaptive retry mode, Vector's adaptive request concurrency) does not see the cluster either. One rate that
every sender of a limit observes into, and that every sender is held to, does.

How
---
``AdaptiveRate`` holds ``rate_per_s`` between ``floor_per_s`` and ``ceiling_per_s`` (the operator's configured
limit). Every send's outcome is ``observe``d, from any thread, in any order: ``Outcome.OK`` (with its latency, if
known), ``Outcome.THROTTLED`` (the sink said "too many", with its ``Retry-After`` if it gave one) or
``Outcome.ERROR`` (it failed for another reason: counted, no congestion). An OK slower than ``slow_s`` (when set)
is congestion too: a database's latency climbs before it refuses anything.

- **decrease, once per congestion event:** the first congestion signal reads what the sink delivered a second
  over the last epoch (while it was asked: every Retry-After pause in it is left out, and every span in which
  no sender sent -- ``idle`` to ``busy``, Spark's pause between two micro-batches) -- the sink's capacity as
  of now, ``reading`` -- and sets the rate to that less ``margin``, no higher than ``cut`` times the rate and no
  lower than ``max_cut`` times it; it holds for ``epoch_s`` (the 429s that follow within it answer sends made at
  the old rate, every worker's in flight, and are the same event). What that epoch delivered is read too: the
  sink takes at least that, and a reading made while some answers were not yet told is low. A second event
  before the rate grew at all says the reading was high (a short reading holds the sink's own burst): the cut is
  then ``cut_again``, not ``cut``. A rate far above the sink comes down in two or three events, not in the dozens
  a fixed factor takes.
- **increase, while clean and used, on a cubic in time** (TCP CUBIC's, with the sink's reading as its W_max):
  each epoch without congestion in which the sink delivered at least ``USED`` of the rate adds its seconds to
  ``t``, and the rate becomes ``reading + probe x reading x (t - K)^3``, ``K`` the seconds the curve takes from
  the cut back to the reading. The rate comes back fast to just below where the sink refused, stays there a
  while (the curve is flat around it), and only then probes above it, faster and faster: a sink whose capacity
  grew by half is found in seconds, and at an unchanged one the refusals that end a probe are few and seconds
  apart. An epoch that delivered less says nothing about the sink (the job sent less): the rate and ``t`` stay,
  so a job that idles does not climb to the ceiling and overrun the sink when it resumes.
- **a refusal that costs a pause probes later:** a probe above an unchanged capacity ends in a refusal, and a
  refusal whose Retry-After pauses every sender for half an epoch or more (HTTP's Retry-After is whole seconds:
  at least one) costs the whole job that pause. After such a refusal the curve's ``probe`` is ``PAUSED_PROBE``
  of it: a slow creep, so one probe's pause is a small part of the time between two. And its curve starts at
  the rate the cut set, not back at the reading: with no pause between two of its refusals the sink took
  everything sent since the last one, so the reading is what was sent -- above what the sink takes by its own
  bucket spread over those seconds (a sink of 700/s read as 730-780) -- and a curve flat there ran into the sink
  on its plateau, about 7 s after each cut. Once such a curve passes its reading (the cut, now) by ``margin``
  with no refusal, the sink grew: the rate climbs by ``PAUSED_STEP`` an epoch until the sink refuses. A cubic
  flat from there (the full pace, from the rate) took 4-5 s more to reach a sink grown by 70 %, and so needed
  probes twice as often (an eighth of the pace) to follow one within 10 s wherever in the cycle it grew -- and
  still did not, once in three. Measured on the benchmark's whole-second sink, six runs each, the capacity
  changing at three points of the probe cycle: the rise from 700/s to 1,200/s followed in 4-10 s in all six
  (the cubic: 7-13 s, and once not within 16 s), 0.886-0.913 of the capacity taken at 700/s (0.834-0.908).
  That reading is the send rate only when no pause fell in its span: a refusal that comes within two epochs of
  another's pause read the sink while it refused -- what it takes, if anything low, as some answers are told
  late -- and the curve comes back to it at the full pace. Crept up to from the cut, a sink shrunk from 1,200/s
  to 400/s, read at 360-370 after its chain of refusals, was held at 0.8-0.85 of it for the rest of the 16 s
  in three runs of nine; back to the reading at the full pace, it was held in 7-13 s in six runs of six.
- **no reading, no curve around it:** a cut bounded by ``max_cut`` read far less than the rate (a stream that had
  just started, a sink that barely answers): the curve then starts flat at the rate set and probes up from it at
  the full pace, rather than sit near a reading that says nothing. A refusal less than half an epoch of sending
  after a pause reads nothing (what the sink took then is its own burst, refilled during the pause): above the
  last reading the rate comes down to it, at or below it the cut alone applies -- and ``cut_again`` once more
  for the second such refusal in a row and every one after it, until the rate grows (0.85, then 0.72 each
  time). Behind whole-second pauses every refusal costs the job a second: a sink that shrank from 1,200/s to
  400/s, refused at once after each pause, took seven cuts of 0.85, and the Spark job of the benchmark 10-11 s
  (once never within 16 s) to take 0.9 of it again, in seven runs; with the deeper cut 7-8 s in four. Deeper
  still (0.61, 0.52, ...), a refusal at a micro-batch's start, from the sink's bucket of 80 at 400/s, cut the
  rate far below the sink, and it climbed back for longer than the cuts had saved (never within 16 s, three
  runs of three).
- **Retry-After:** the sink's own pause, ``paused_for_s()``, for every sender of the limit (at most
  ``max_pause_s``, so a bogus header cannot stall a cluster for an hour).
- **the operator wins:** ``set_ceiling`` sets the ceiling and the rate to the operator's value at once (a cut
  for maintenance must hold now; a raise is what was asked for), and ``changed_by`` says so until the next
  adaptation.

Worked example, ceiling 2,000/s, epoch 1 s, cut 0.97, cut_again 0.85, max cut 0.5, margin 0.07, probe 0.004, a
sink that takes 700/s and says its exact wait: sending at 2,000/s, the first 429 comes a moment in; the sink
delivered 700 in the last second, so the rate becomes max(0.5 x 2,000, min(0.97 x 2,000, 0.93 x 700)) = 1,000.
The 429s go on (1,000 > 700) before it grew: max(500, min(0.85 x 1,000, 651)) = 651, reading 700. Clean from
there, K = cbrt((700 - 651) / (0.004 x 700)) = 2.6 s: 689, 699, 700, 708, 739, 810 at 1 to 6 s; the sink's burst
(140) spent, the probe ends in a 429 about 6 s after the cut and the same again from ~651: a sawtooth of about
six seconds between 651 and ~800, flat for two of them around 700. The same sink answering whole seconds (a
pause of a second after each refusal): probe 0.00024 from the cut, 651 + 0.17 t^3 -- 656 at 3 s, 672 at 5 s, 697
(the cut passed by the margin) at 6.4 s; from there 15 % an epoch, 801 a second later, and the sink's bucket (140)
is spent about 1.4 s into that: a probe every 9 s or so at an unchanged capacity. A sink grown to 1,200/s takes
801, 922, 1,060, 1,219: held at 0.9 of it about 10 s after a paused refusal at most, sooner the later in the
cycle it grew.
Simulated (``tests/limiter``: the sink a token bucket of 700/s holding a tenth of a second, a 429 beyond it, a job
that always wants more): 0.99 of the capacity delivered over 30 s with 0.02 % of the sends refused; the sink
grown to 1,200/s, held at 0.9 of it from the sixth second on; shrunk to 400/s, at once. Measured in a Spark job
against a real HTTP server: ``benchmarks/bench_adaptive.py``.

Consistency: observations and reads are serialised by one lock; ``rate_per_s(now_s)`` settles a finished epoch
first, so a reader sees the rate as of now. Time is the caller's (``now_s`` on every call, seconds of one
monotonic clock), as in ``limiter.grants``: the control plane passes its own.
"""

from __future__ import annotations

import enum
import math
import threading
from dataclasses import dataclass

from .checks import at_least_zero, finite, positive

__all__ = ["AdaptiveRate", "AdaptiveSnapshot", "Outcome", "checked_outcome"]

USED = 0.7            # of the rate: an epoch that delivered less than this says nothing about the sink's capacity
PAUSED_PROBE = 0.06   # of ``probe`` after a refusal whose Retry-After paused every sender half an epoch or more
PAUSED_STEP = 0.15    # of the rate an epoch: the climb once such a probe passed its cut by the margin, clean
MAX_PAUSES_KEPT = 256  # pauses remembered for a reading (a sink that says its exact wait: a few a second)
CUT_AGAIN = 0.85      # the defaults of ``cut_again`` and ``probe`` (also for a state kept before they existed)
PROBE = 0.004


class Outcome(enum.Enum):
    OK = "ok"
    THROTTLED = "throttled"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class AdaptiveSnapshot:
    rate_per_s: float
    ceiling_per_s: float
    floor_per_s: float
    paused_for_s: float
    changed_by: str        # "operator", "decrease", "increase" or "retry-after"
    ok: int                # outcomes observed since the start
    throttled: int
    errors: int


def checked_outcome(outcome: Outcome | str, n: float, retry_after_s: float | None = None,
                    latency_s: float | None = None, *, by_value: bool = True
                    ) -> tuple[Outcome, float, float | None, float | None]:
    """(outcome, n, retry_after_s, latency_s) of one report of sends, checked: ``outcome`` an ``Outcome`` (or, with
    ``by_value``, its value: "ok", "throttled", "error"), ``n`` > 0, a Retry-After (>= 0) only with a throttled
    outcome, a latency >= 0. Clear errors otherwise; the one check of ``AdaptiveRate.observe`` and of the
    participants' sums."""
    if not isinstance(outcome, Outcome):
        found = next((o for o in Outcome if by_value and o.value == outcome), None)
        if found is None:
            raise ValueError(f"outcome must be one of {[o.value for o in Outcome]}, got {outcome!r}")
        outcome = found
    n = positive("n", n, unit="sends")
    if retry_after_s is not None:
        if outcome is not Outcome.THROTTLED:
            raise ValueError(f"retry_after_s goes with a throttled outcome, not {outcome.value!r}")
        retry_after_s = at_least_zero("retry_after_s", retry_after_s, unit="seconds")
    if latency_s is not None:
        latency_s = at_least_zero("latency_s", latency_s, unit="seconds")
    return outcome, n, retry_after_s, latency_s


def _fraction(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and 0 < value < 1):
        raise ValueError(f"{name} must be a number > 0 and < 1, got {value!r}")
    return float(value)


def _covered_s(spans: list[list[float]], start: float, end: float) -> float:
    """Seconds of ``[start, end]`` within any of ``spans`` (``[from, until]`` each; they may overlap)."""
    covered, reach = 0.0, start
    for began, until in sorted(spans):
        began, until = max(began, reach), min(until, end)
        if until > began:
            covered, reach = covered + until - began, until
    return covered


class AdaptiveRate:
    """One adaptive limit (see the module essay). Thread-safe."""

    def __init__(self, ceiling_per_s: float, floor_per_s: float = 0.0, *, epoch_s: float = 1.0,
                 cut: float = 0.97, cut_again: float = CUT_AGAIN, max_cut: float = 0.5, margin: float = 0.07,
                 probe: float = PROBE, slow_s: float | None = None, max_pause_s: float = 30.0, now_s: float = 0.0):
        self.epoch_s = positive("epoch_s", epoch_s, unit="seconds")
        self.cut = _fraction("cut", cut)
        self.cut_again = _fraction("cut_again", cut_again)
        self.max_cut = _fraction("max_cut", max_cut)
        if self.max_cut > min(self.cut, self.cut_again):
            raise ValueError(f"max_cut ({max_cut!r}) must be <= cut ({cut!r}) and cut_again ({cut_again!r}): it is "
                             "the deepest cut of one event")
        self.margin = 0.0 if margin == 0 else _fraction("margin", margin)
        self.slow_s = slow_s
        self.max_pause_s = positive("max_pause_s", max_pause_s, unit="seconds")
        self._lock = threading.Lock()
        self.ceiling_per_s = positive("ceiling_per_s", ceiling_per_s, unit="per second")
        self.floor_per_s = self._checked_floor(floor_per_s, self.ceiling_per_s)
        self.probe = positive("probe", probe, unit="of the reading per second cubed")
        self._rate = self.ceiling_per_s
        self._read_per_s = 0.0          # what the sink delivered a second when it last refused (0: never read)
        self._reading = 0.0             # the curve's W_max: that reading, or the rate it probes up from
        self._base = self._rate         # the rate the last decrease set
        self._grown_s = 0.0             # clean, used seconds since then (the cubic's t)
        self._curve_probe = self.probe  # the cubic's probe since the last decrease
        self._curve_scale = 0.0         # what the probe is a fraction of (a rate per second)
        self._held_epoch = False        # the current epoch began with a decrease: what it delivers is read too
        self._last_pause_s = 0.0        # the Retry-After of the last refusal that gave one
        self.changed_by = "operator"
        now = float(finite("now_s", now_s, unit="seconds"))
        self._epoch_at = now            # the current epoch started then
        self._hold_until = -math.inf    # no decrease before then (the last event's signals still arrive)
        self._paused_until = -math.inf
        self._pauses: list[list[float]] = []   # [from, until] of the pauses of the last two epochs or so
        self._idle: list[list[float]] = []     # [from, until] of the spans no sender sent (``idle``/``busy``)
        self._idle_since: float | None = None  # every sender stopped then, and none has come back yet
        self._delivered = 0.0           # OK outcomes (weights) in the current epoch
        self._last_epoch = (0.0, 0.0)   # (delivered, seconds) of the epoch before
        self._congested = False         # a congestion signal in the current epoch
        self._unread = 0                # refusals in a row that read nothing, at or below the last reading
        self._stepping = False          # a paused probe passed its cut clean: the sink grew, the rate climbs
        self.ok = self.throttled = self.errors = 0

    def __getstate__(self) -> dict[str, object]:
        """Picklable (a control plane keeps an adaptive limit's state in a shared store): all but the lock."""
        with self._lock:
            state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        # a state kept by an earlier version (a fixed step, no curve): the curve starts flat at its rate
        rate = float(state.get("_rate", state.get("ceiling_per_s", 0.0)))  # type: ignore[arg-type]
        self.__dict__.update({"cut_again": CUT_AGAIN, "probe": PROBE, "_read_per_s": 0.0, "_reading": rate,
                              "_base": rate, "_grown_s": 0.0, "_curve_probe": PROBE, "_curve_scale": rate,
                              "_held_epoch": False, "_last_pause_s": 0.0, "_pauses": [], "_idle": [],
                              "_idle_since": None, "_unread": 0, "_stepping": False})
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def slow_s(self) -> float | None:
        """An OK slower than this is congestion (None: latency is no signal); settable live."""
        return self._slow_s

    @slow_s.setter
    def slow_s(self, value: float | None) -> None:
        self._slow_s = None if value is None else positive("slow_s", value, unit="seconds, or None")

    @staticmethod
    def _checked_floor(floor_per_s: float, ceiling_per_s: float) -> float:
        floor = at_least_zero("floor_per_s", floor_per_s, unit="per second")
        if floor > ceiling_per_s:
            raise ValueError(f"floor_per_s ({floor_per_s!r}) must be <= ceiling_per_s ({ceiling_per_s!r})")
        return floor

    # --- what the senders report ----------------------------------------------------------------------------

    def observe(self, outcome: Outcome, n: float, now_s: float, *, retry_after_s: float | None = None,
                latency_s: float | None = None) -> None:
        """``n`` sends ended with ``outcome``; ``retry_after_s``: the sink's Retry-After (THROTTLED only);
        ``latency_s``: how long the send took (an OK slower than ``slow_s`` is congestion)."""
        outcome, n, retry_after_s, latency_s = checked_outcome(outcome, n, retry_after_s, latency_s, by_value=False)
        now = float(finite("now_s", now_s, unit="seconds"))
        with self._lock:
            self._roll(now)
            if outcome is Outcome.ERROR:
                self.errors += int(n)
                return
            if outcome is Outcome.OK:
                self.ok += int(n)
                self._delivered += n
                if self.slow_s is None or latency_s is None or latency_s <= self.slow_s:
                    return
            else:
                self.throttled += int(n)
            self._congested = True
            pause_s = min(retry_after_s, self.max_pause_s) if retry_after_s else 0.0
            if pause_s:
                self._last_pause_s = pause_s
            if now >= self._hold_until:
                self._decrease(now)
            if pause_s:
                until = now + pause_s
                if until > self._paused_until:
                    if now >= self._paused_until or not self._pauses:
                        self._pauses.append([now, until])
                        del self._pauses[:-MAX_PAUSES_KEPT]   # (a reading prunes them; bounded without one too)
                    else:
                        self._pauses[-1][1] = until
                    self._paused_until, self.changed_by = until, "retry-after"

    def idle(self, now_s: float) -> None:
        """Every sender of the limit stopped at ``now_s`` (its tasks ended: Spark's pause between two
        micro-batches): until ``busy``, the sink is not asked, and what it delivered is read over the time it
        was."""
        now = float(finite("now_s", now_s, unit="seconds"))
        with self._lock:
            if self._idle_since is None:
                self._idle_since = now

    def busy(self, now_s: float) -> None:
        """A sender of the limit is back at ``now_s`` (after ``idle``)."""
        now = float(finite("now_s", now_s, unit="seconds"))
        with self._lock:
            since, self._idle_since = self._idle_since, None
            if since is not None and now > since:
                self._idle.append([since, now])
                del self._idle[:-MAX_PAUSES_KEPT]

    # --- what the senders are held to -----------------------------------------------------------------------

    def rate_per_s(self, now_s: float) -> float:
        """The rate every sender of the limit is held to at ``now_s`` (0 while the sink asked for a pause)."""
        with self._lock:
            self._roll(now_s)
            return 0.0 if now_s < self._paused_until else self._rate

    def paused_for_s(self, now_s: float) -> float:
        """Seconds left at ``now_s`` of the pause the sink asked for (Retry-After), 0 if none."""
        with self._lock:
            return max(0.0, self._paused_until - now_s)

    def set_ceiling(self, ceiling_per_s: float, floor_per_s: float | None = None) -> None:
        """The operator's live change: the ceiling (and the floor) now, and the rate at the ceiling at once."""
        ceiling = positive("ceiling_per_s", ceiling_per_s, unit="per second")
        floor = self._checked_floor(self.floor_per_s if floor_per_s is None else floor_per_s, ceiling)
        with self._lock:
            self.ceiling_per_s, self.floor_per_s = ceiling, floor
            self._rate, self.changed_by = ceiling, "operator"
            self._read_per_s = self._reading = 0.0
            self._base, self._grown_s, self._unread, self._stepping = ceiling, 0.0, 0, False

    def snapshot(self, now_s: float) -> AdaptiveSnapshot:
        with self._lock:
            self._roll(now_s)
            return AdaptiveSnapshot(self._rate, self.ceiling_per_s, self.floor_per_s,
                                    max(0.0, self._paused_until - now_s), self.changed_by, self.ok, self.throttled,
                                    self.errors)

    # --- the rules (under the lock) ---------------------------------------------------------------------------

    def _delivered_per_s(self, now: float) -> float | None:
        """What the sink delivered a second over the last epoch and this one, while it was asked: a pause
        (Retry-After) in them is left out -- the sink was not asked then. Counting it, a sink of 700/s that
        refused again soon after a pause read as 230-450/s, and the rate was cut to a half or two thirds of its
        capacity. So is a span in which no sender sent (``idle``): a stream's first sends after Spark's pause
        between two micro-batches meet a sink whose bucket refilled only part of that pause, and the refusal read
        the pause as a sink that took less. None if that leaves less than half an epoch: what the sink took then
        is mostly its own burst, refilled while it was not asked, or the answers of sends made before the pause,
        and over a few tenths of a second either reads as far more than it takes."""
        delivered, seconds = self._last_epoch
        start = self._epoch_at - seconds
        # every pause in them (a sink that says its exact wait pauses the senders many times a second while it
        # refuses: counting only the last, a sink shrunk to 400/s read as 255)
        self._pauses = [p for p in self._pauses if p[1] > start]
        self._idle = [p for p in self._idle if p[1] > start]
        idle_now = [[self._idle_since, now]] if self._idle_since is not None else []
        paused = _covered_s(self._pauses + self._idle + idle_now, start, now)
        asked_s = now - start - paused
        if asked_s < 0.5 * self.epoch_s:
            return None
        return (delivered + self._delivered) / asked_s

    def _decrease(self, now: float) -> None:
        reading = self._delivered_per_s(now)
        # a second event before the rate grew at all: the reading that set it was high
        again = self._reading > 0 and self._grown_s == 0
        cut = self.cut_again if again else self.cut
        if reading is None:
            # too short to read: above the last reading (or with none yet), down to it -- by max_cut at most; at
            # or below it (a burst the sink refused, or a capacity that fell), the cut alone; the curve back to it
            if self._read_per_s <= 0 or self._rate > self._read_per_s:
                self._cut_to(max(self._rate * self.max_cut, self._read_per_s * (1 - self.margin)))
            else:
                # (the second in a row and after: cut_again once more -- see the essay)
                self._cut_to(self._rate * max(self.max_cut, cut * (self.cut_again if self._unread else 1.0)))
                self._unread += 1
            if self._reading <= self._rate:
                self._anchor(self._rate)
        else:
            self._unread = 0
            read_before, self._read_per_s = self._read_per_s, reading
            self._cut_to(min(self._rate * cut, max(self._rate * self.max_cut, reading * (1 - self.margin))))
            if reading * (1 - self.margin) >= self._rate:
                # the sink's own capacity, read: the curve comes back to it -- or, when the refusal cost every sender
                # a pause and none fell in the reading's span, starts at the cut (that reading is what was sent, not
                # what the sink takes: see the essay) and probes above it gently. A pause in the span (``_pauses``
                # holds those that ended in it) says the sink was read while it refused: what it takes, if anything
                # low (its last answers not yet told), and the curve comes back to it at the full pace
                costly = self._last_pause_s >= 0.5 * self.epoch_s and not self._pauses
                self._reading = self._rate if costly else reading
                self._curve_probe = self.probe * (PAUSED_PROBE if costly else 1.0)
                self._curve_scale = reading
            else:
                # a cut bounded by max_cut (the sink delivered far less than the rate: a reading of a job that was
                # just starting, or a sink that barely answers): no capacity read, the curve probes up from the rate
                self._anchor(self._rate, read_before)
        self._hold_until = now + self.epoch_s
        self._start_epoch(now)
        self._held_epoch = True

    def _cut_to(self, rate: float) -> None:
        """The rate a decrease sets (never below the floor), and the curve's start."""
        self._stepping = False
        self._rate, self.changed_by = max(self.floor_per_s, rate), "decrease"
        self._base, self._grown_s = self._rate, 0.0

    def _anchor(self, rate: float, read_per_s: float | None = None) -> None:
        """The curve from ``rate``, flat there, then above it at the full ``probe``: no capacity read near it. Its
        pace is a fraction of the last reading (``read_per_s``, else the one kept) if that is higher: a rate cut
        deep (a sink that shrank, read through pauses) finds the sink again in seconds, not at a fraction of its
        own small self (from 250/s, +125 in 5 s)."""
        self._reading, self._base, self._grown_s, self._curve_probe = rate, rate, 0.0, self.probe
        self._curve_scale = max(rate, self._read_per_s if read_per_s is None else read_per_s)

    def _on_curve(self) -> float:
        """The cubic's rate ``_grown_s`` after the last decrease: back to the reading in K seconds, flat around
        it, then above it faster and faster; never below the rate the decrease set."""
        reading, c = self._reading, self._curve_probe * self._curve_scale
        if c <= 0:
            return self.ceiling_per_s   # never refused: nothing to follow
        k_s = (max(0.0, reading - self._base) / c) ** (1 / 3)
        return max(self._base, reading + c * (self._grown_s - k_s) ** 3)

    def _roll(self, now: float) -> None:
        """Settle the current epoch if it is over: an increase if it was clean and used."""
        elapsed = now - self._epoch_at
        if elapsed < self.epoch_s:
            return
        if self._held_epoch:
            self._read_held_epoch(self._delivered / elapsed)
        if not self._congested and self._delivered >= USED * self._rate * elapsed and self._rate < self.ceiling_per_s:
            self._grown_s += elapsed
            grown = (self._rate * (1 + PAUSED_STEP) ** (elapsed / self.epoch_s) if self._stepping
                     else self._on_curve())
            self._rate = min(self.ceiling_per_s, grown)
            self.changed_by = "increase"
            self._unread = 0
            if self._curve_probe < self.probe and self._rate > (1 + self.margin) * self._reading:
                # clean well above the cut: the sink grew -- climb by PAUSED_STEP an epoch until it refuses (a
                # cubic flat from here took 4-5 s more to a sink grown by 70 %)
                self._stepping, self._curve_probe = True, self.probe
        self._start_epoch(now)

    def _read_held_epoch(self, held_per_s: float) -> None:
        """The epoch after a decrease delivered ``held_per_s``: the sink takes at least that (it had just refused,
        so its own burst was spent). A reading at the refusal reads low when the answers of some sends were not
        yet told (a participant tells its OKs with its next ask, a quarter of a second later; a refusal at once):
        a sink shrunk to 400/s read as 280, and the rate sat at 260. Read higher here, the curve comes back to
        it."""
        if held_per_s > self._reading:
            self._reading, self._read_per_s = held_per_s, max(self._read_per_s, held_per_s)
            self._curve_scale = max(self._curve_scale, held_per_s)

    def _start_epoch(self, now: float) -> None:
        self._last_epoch = (self._delivered, now - self._epoch_at)
        self._epoch_at, self._delivered, self._congested, self._held_epoch = now, 0.0, False, False
