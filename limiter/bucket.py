"""AsyncTokenBucket: Pulsar's PIP-322 token bucket, lock-free on the consume path.

How it works
------------
A token bucket holds up to ``capacity`` tokens and gains ``rate`` tokens every ``period_s`` seconds. Sending
consumes tokens; a producer whose send leaves the bucket without tokens is throttled (paused) by its limiter until
the bucket has refilled. Accepted work cannot be refused after the fact, so the balance may go negative: the
debt is repaid from later refills, and the long-run admitted amount is exactly ``capacity + rate * t``.

Keeping the balance exact on every call would need a lock or a compare-and-set loop on every send; Pulsar's
old "precise" limiter did that and one throttled topic raised the p99 latency of unrelated topics (#21442).
So the bucket is *eventually consistent* with a ``resolution_s`` (default 16 ms):

- ``_tokens`` is the balance as of the last update, at ``_last_ns``.
- Within one resolution tick, ``consume`` only *records* the amount, through one of two exact channels that need
  no lock in any CPython build (free-threaded included; neither relies on the GIL):

  * ``consume(1)`` (one message) takes the next number from ``_units``, an ``itertools.count``. Every number is
    handed out once, so an update that takes a number itself knows exactly how many were taken before it.
    The same number answers "tokens left?": it is below ``_units_mark`` (the last update's position plus its
    *allowance*) exactly while that allowance covers it -- one C call does both jobs, and this path reads no
    clock at all (it is the hot path: about 2.7 no-op method calls, benchmarks/bench_bucket.py). The allowance is
    the balance the update saw, but at most ``_slice_units``, one resolution tick's refill: the call that finds
    the slice used up updates at once if the balance was larger, or throttles until the next tick if the balance
    is spent. Without the slice, a bucket left full and idle would count its whole idle time's refill at the
    first update after a burst of ``capacity`` sends (the cap below cannot know when they happened) and admit
    a second burst; with it, an update comes at least every slice, so the slack is one tick's refill.
  * any other amount is appended to a ``collections.deque`` (atomic ``append``/``popleft``: the job Pulsar gives
    a ``LongAdder``), and lowers ``_estimate``, a cheap running guess of the balance.
  Both channels belong to ``_consumed``, an ``ExactCounter`` (counter.py), which settles them under a lock.
  A charge that reads the tick (any amount but 1, a ``consume(1)`` past its allowance) stores it in ``charged_ns``
  (None before): when the bucket was last spent from, for a participant dating its pools' spends (a pool's allowance
  is one unit, so each send reads it). One store, no clock read; the tick lags (``limiter.clock.TICK_LAG_S``).
- The first call in a new tick (for ``consume(1)``: the call that finds its allowance used up) takes the update
  try-lock (it never waits for it: a thread that loses the race records like the fast path) and computes::

      new     = (elapsed_ns * rate + remainder) // period_ns      # integer arithmetic on exact fractions
      tokens  = min(tokens + new - pending, capacity) - this_call

  where ``pending`` is the units taken plus the deque drained since the last update. The remainder of the
  division is carried to the next update, so many tiny updates lose no fraction of a token. Pending consumption
  is subtracted *before* the capacity cap: capping first would silently forgive everything consumed during a
  pause long enough to refill past capacity (the order Pulsar's newer code uses). ``this_call`` is subtracted
  after the cap, so a send never hides inside a full bucket's overflow.
- ``tokens()``, read from outside, forces an update and so is always consistent (Pulsar #24012: reading a stale
  balance during spikes drove buckets deeply negative and stalled producers).

Consistency rules
-----------------
1. Every consumed token is subtracted exactly once (numbers are counted once; the deque is drained only under
   the update lock).
2. ``tokens()`` is exact at the moment it returns; ``consume_and_check`` answers from the balance at the last
   update less what was recorded since. Between two updates each channel admits at most the balance the last
   update saw (the unit channel exactly, and at most one tick's refill of it; the deque's ``_estimate`` may miss
   a decrement under a race, and the two channels do not see each other's consumption until the next update),
   so the eventual-consistency slack is bounded by the balance, not by how fast producers call. All of it is
   charged at the next update.
3. A ``resolution_s`` of 0 makes every call update: always consistent, for tests and for exact accounting.
4. Changing ``rate`` first settles the tokens earned at the old rate up to now; changing ``capacity`` does the
   same and then trims a balance above the new capacity (a bucket never holds more than its capacity).
   Neither adds tokens or forgives debt.
5. A reading of the clock older than one already used (another thread read later and updated first) counts as
   no time passed; time never runs backwards for the bucket.

Throttling duration
-------------------
0 while the bucket has tokens; otherwise the time to refill to ``max(resolution * rate / period, 1)`` tokens (a
tick's refill: no waking a producer for a bucket empty again within the tick), ``(target - tokens) * period /
rate``. A small bucket aims lower, down to one token, to keep a tick's refill of room below its capacity: what
refills while a producer wakes up late (the timer's thread, then its own, waiting for the GIL) must not overflow.

Worked example (rate=10, period_s=1, capacity=100, initial_tokens=0, resolution_s=0.016)
---------------------------------------------------------------------------------------
t=0.000  bucket created: tokens=0.
t=0.001  consume_and_check(5): same tick (next update at 0.016): pending=[5], estimate=-5 -> False (throttle).
t=0.002  consume_and_check(1): takes a number from _units; no allowance yet (mark -1), so it updates:
         new = 2 ms * 10/s = 0.02 token -> 0 whole, remainder 0.02; tokens = min(0 + 0 - 5, 100) - 1 = -6;
         allowance 0 -> False (and until the next tick at 0.018, further consume(1) calls just say False).
t=0.010  throttling_duration_s(): forced update: new = 8 ms * 10/s + 0.02 = 0.1 token -> 0, remainder 0.1;
         tokens = -6; target = max(0.016*10, 1) = 1 -> (1 - -6) / 10 = 0.7 s.
t=0.710  tokens(): new = (700 ms * 10 + 0.1 carried) = 7.1 -> 7, remainder 0.1; tokens = -6 + 7 = 1.
t=20.0   tokens(): 19.29 s * 10 + 0.1 = 193 -> min(1 + 193, 100) = 100 (full; the rest is not stored).
"""

from __future__ import annotations

import math
import threading
from fractions import Fraction

from .checks import at_least_zero, finite, positive
from .clock import NS_PER_S, Clock, SystemClock, seconds_to_ns
from .counter import ExactCounter

__all__ = ["AsyncTokenBucket", "DEFAULT_RESOLUTION_S"]

DEFAULT_RESOLUTION_S = 0.016


def _as_fraction(value: float) -> Fraction:
    # Floats such as 0.1 are not exact in binary; a denominator of at most 10^6 keeps rates like 0.1/s exact
    # and the integer arithmetic of an update small.
    return Fraction(value).limit_denominator(1_000_000)


class AsyncTokenBucket:
    """A lock-free, eventually consistent token bucket (Pulsar PIP-322). See the module essay."""

    __slots__ = (
        "_clock", "_tick", "_period_ns", "_resolution_ns", "_rate", "_capacity", "_den", "_rate_num",
        "_tokens", "_estimate", "_remainder", "_last_ns", "_next_update_ns", "_consumed", "_pending_append",
        "_units", "_units_mark", "_units_refresh_ns", "_slice_units", "_counted_at_update", "_charged_directly",
        "charged_ns", "_lock", "__weakref__",
    )

    def __init__(
        self,
        rate: float,
        capacity: float | None = None,
        initial_tokens: float | None = None,
        period_s: float = 1.0,
        resolution_s: float = DEFAULT_RESOLUTION_S,
        clock: Clock | None = None,
    ):
        positive("period_s", period_s)
        at_least_zero("resolution_s", resolution_s, rule=" (0 = always consistent)")
        self._clock = clock or SystemClock()
        self._tick = self._clock.tick_cell
        self._period_ns = seconds_to_ns(period_s)
        self._resolution_ns = seconds_to_ns(resolution_s)
        self._set_rate(positive("rate", rate))
        self._capacity = positive("capacity", capacity if capacity is not None else rate)
        tokens = self._capacity if initial_tokens is None else initial_tokens
        if not isinstance(tokens, int | float) or not math.isfinite(tokens) or tokens > self._capacity:
            raise ValueError(f"initial_tokens must be a finite number <= capacity ({self._capacity}), got {tokens!r}")
        self._tokens = tokens
        self._estimate = tokens
        self._remainder = 0
        self._last_ns = self._clock.now_ns()
        self._next_update_ns = self._last_ns + self._resolution_ns
        self._consumed = ExactCounter()
        self._units = self._consumed.units  # the hot path uses both channels directly, saving a call
        self._pending_append = self._consumed.append
        self._units_mark = -1        # the first consume(1) updates, which sets the allowance
        self._units_refresh_ns = 0
        self._counted_at_update = 0  # the counter's total at the last update
        self._charged_directly = 0  # consumption charged by the updating call itself (never in the counter)
        self.charged_ns: int | None = None   # the tick of the newest charge that read one (see the essay)
        self._lock = threading.Lock()

    # --- the hot path -------------------------------------------------------------------------------------

    def consume_and_check(self, n: float = 1) -> bool:
        """Consume ``n`` tokens; True while tokens remain (False means: throttle this producer). Never blocks."""
        if n == 1:
            if next(self._units) < self._units_mark:
                return True
            return self._unit_allowance_spent()
        tick = self._tick[0] or self._clock.snapshot_ns()   # (0: the ticker is parked, limiter.clock)
        self.charged_ns = tick
        if tick < self._next_update_ns:
            self._pending_append(n)
            estimate = self._estimate - n
            self._estimate = estimate
            return estimate > 0
        return self._update(tick, n) > 0

    def _unit_allowance_spent(self) -> bool:
        """consume(1) found the last update's allowance used up (its number is taken, and counted)."""
        tick = self._tick[0] or self._clock.snapshot_ns()   # (0: the ticker is parked, limiter.clock)
        self.charged_ns = tick
        if tick < self._units_refresh_ns:
            return False  # that update's balance is spent, and refills are counted from the next tick on
        return self._update(tick, 0, unit_taken=True) > 0

    def consume(self, n: float = 1) -> None:
        """Consume ``n`` tokens, whatever the balance (it may go negative). Never blocks."""
        self.consume_and_check(n)

    def contains_tokens(self, force_update: bool = False) -> bool:
        """True if the bucket holds tokens. Updates unless another thread is updating right now (then it answers
        from the last update); ``force_update`` waits for that thread instead. Not meant for the hot path."""
        if force_update:
            return self.tokens() > 0
        return self._update(self._clock.now_ns(), 0) > 0

    # --- consistent reads ---------------------------------------------------------------------------------

    def tokens(self) -> float:
        """The consistent balance now (forces an update; may be negative)."""
        with self._lock:
            return float(self._update_locked(self._clock.now_ns(), 0))

    def consumed_total(self) -> float:
        """Every token consumed since the bucket was made (forces an update; exact)."""
        with self._lock:
            self._update_locked(self._clock.now_ns(), 0)
            return self._counted_at_update + self._charged_directly

    def throttling_duration_s(self) -> float:
        """Seconds until the bucket holds tokens again (0 if it holds some now)."""
        return self.refill_time_s(self.tokens())

    def refill_time_s(self, balance: float) -> float:
        """Seconds for a balance of ``balance`` to refill to the throttling target (0 if it is positive)."""
        if balance > 0:
            return 0.0
        rate_per_ns = self._rate / self._period_ns
        tick = self._resolution_ns * rate_per_ns   # (due full: a 1-token split of 100/s lost 4-6 % to late wake-ups)
        target = max(min(max(tick, 1.0), self._capacity - tick), min(1.0, self._capacity))
        return (target - balance) / rate_per_ns / NS_PER_S

    def deposit(self, n: float) -> float:
        """Add ``n`` tokens now (a grant; negative: take them back), up to the capacity; not counted as consumed.
        Returns the balance after it."""
        finite("a deposit", n, unit="tokens")
        with self._lock:
            now = self._clock.now_ns()
            self._update_locked(now, 0)
            self._tokens = min(self._tokens + n, self._capacity)
            return float(self._update_locked(now, 0))   # the fast path's allowance follows the new balance

    # --- live changes -------------------------------------------------------------------------------------

    @property
    def rate(self) -> float:
        return self._rate

    @rate.setter
    def rate(self, value: float) -> None:
        positive("rate", value)
        with self._lock:
            self._update_locked(self._clock.now_ns(), 0)  # tokens earned so far at the old rate
            old_den = self._den
            self._set_rate(value)
            # carry the fraction of a token already earned into the new denominator
            self._remainder = self._remainder * self._den // old_den

    @property
    def capacity(self) -> float:
        return self._capacity

    @capacity.setter
    def capacity(self, value: float) -> None:
        positive("capacity", value)
        with self._lock:
            self._update_locked(self._clock.now_ns(), 0)
            self._capacity = value
            if self._tokens > value:
                self._tokens = value
                self._update_locked(self._clock.now_ns(), 0)  # the unit allowance, from the trimmed balance

    @property
    def period_s(self) -> float:
        return self._period_ns / NS_PER_S

    @property
    def resolution_s(self) -> float:
        return self._resolution_ns / NS_PER_S

    def __repr__(self) -> str:
        return (f"AsyncTokenBucket(rate={self._rate}, capacity={self._capacity}, tokens~{self._estimate}, "
                f"period_s={self.period_s}, resolution_s={self.resolution_s})")

    # --- internals ----------------------------------------------------------------------------------------

    def _set_rate(self, rate: float) -> None:
        fraction = _as_fraction(rate)
        self._rate = rate
        self._rate_num = fraction.numerator
        self._den = self._period_ns * fraction.denominator
        # the most consume(1) calls one update admits: one resolution tick of refill (at least 1; 0 when
        # resolution_s is 0, so that every call updates)
        self._slice_units = max(1, math.ceil(rate * self._resolution_ns / self._period_ns)) if self._resolution_ns \
            else 0

    def _update(self, now: int, this_call: float, unit_taken: bool = False) -> float:
        if not self._lock.acquire(blocking=False):
            # Another thread is updating right now: record like the fast path; the next update charges it.
            if this_call:
                self._pending_append(this_call)
            estimate = self._estimate - this_call
            self._estimate = estimate
            return estimate
        try:
            return self._update_locked(now, this_call, unit_taken)
        finally:
            self._lock.release()

    def _update_locked(self, now: int, this_call: float, unit_taken: bool = False) -> float:
        elapsed = now - self._last_ns
        new = 0
        if elapsed > 0:
            new, self._remainder = divmod(elapsed * self._rate_num + self._remainder, self._den)
            self._last_ns = now
        # settle() takes a number itself: every lower number went to a consume(1) before this update.
        total, position = self._consumed.settle()
        consumed = total - self._counted_at_update
        self._counted_at_update = total
        if unit_taken:  # the updating call's own unit is in the counter; like any call's own amount, it is
            consumed -= 1  # charged after the cap (below)
            this_call = 1
        else:
            self._charged_directly += this_call
        tokens = min(self._tokens + new - consumed, self._capacity) - this_call
        self._tokens = tokens
        self._estimate = tokens
        # consume(1) number v = position + k is admitted while k < the allowance: the balance (k < tokens, i.e.
        # v < position + ceil(tokens)), or one tick's refill if the balance is larger -- then the call that finds
        # the slice used up updates at once.
        self._next_update_ns = next_update = max(now, self._last_ns) + self._resolution_ns
        allowance = math.ceil(tokens) if tokens > 0 else 0
        if allowance > self._slice_units:
            allowance = self._slice_units
            self._units_refresh_ns = 0   # more than a slice left: the call that uses the slice up updates at once
        else:
            self._units_refresh_ns = next_update
        self._units_mark = position + allowance
        return tokens
