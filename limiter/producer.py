"""Producer: whatever sends (a Spark task, a thread, a keyed stream), paused while any limit says so.

How it works and why
--------------------
A ``Producer`` holds the publish limiters of every level that applies to it (broker, resource group, tenant,
namespace, topic -- see levels.py) and one ``ThrottleTracker``. Sending is lazy, as in Pulsar: a producer that is
not paused sends and is then charged at every level (``_charge``); any level left without tokens marks its
reason on the tracker, and the producer stays paused until *every* reason has cleared (logical AND of limits).

Two more reasons are capacity reasons, on/off (Pulsar's max pending publish requests and publish buffer
memory): ``send()`` counts a request as pending until its ``with`` block exits (the send completed); above
``max_pending_requests`` or ``max_pending_bytes`` the producer pauses, and it resumes when the pending amount has
fallen to half the maximum (hysteresis, as Pulsar resumes reading at half), so it does not flap on every send.

Three ways to send, one non-blocking core:
- ``try_acquire(msgs, bytes)`` never waits: False while paused (nothing charged), else charges and returns True.
- ``acquire(msgs, bytes, timeout_s=None)`` waits while paused, then charges. The wait is a ``threading.Event``
  set by the tracker's resume callback -- or by a timer on the producer's scheduler for the timeout, so on a
  ``ManualClock`` the timeout fires when the test advances time and no test sleeps.
- ``await acquire_async(...)`` does the same for asyncio, resolving a future on the waiter's own loop.

Large sends: a send is charged whole, and lazily, so a producer that shares a limit with others may run up to
one send ahead of its share. ``most_per_acquire()`` says how large a send keeps that small -- ``ACQUIRE_SHARE``
(a 40th) of the tightest limit per period over its levels: 25 messages at 1,000 msgs/s. The Spark helpers split
larger batches into sends of that size; with no binding limit nothing is split.

Sends that are coming: ``will_send(msgs)`` says a batch of ``msgs`` is in hand, to go in the sends that follow; each
charge counts it down (``coming_msgs``), and a send refused once all of it is charged is coming too. A shared
limit's pool asks for what is coming in one answer, not a send or three at a time: a Spark task's 62 rows (sends of
25, 25 and 12) are its whole micro-batch, and each ask of a worker whose process runs fifteen others on two cores
waits tens of milliseconds for its thread.

Consistency rules: resuming wakes every waiter that registered before it; a waiter woken by resume may send
even if another waiter's send pauses the producer again before it runs (lazy throttling: one send per resume
round per waiter, the debt carried by the buckets); a waiter woken by its timeout while still paused returns
False and charges nothing. ``_charge`` never runs under the producer's lock (limiters call back into the tracker,
whose callbacks take that lock).
"""

from __future__ import annotations

import asyncio
import math
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from .checks import at_least_zero
from .clock import Clock, Scheduler, SystemClock, scheduler_for
from .publish import PublishRateLimiter
from .throttle import ThrottleReason, ThrottleTracker

__all__ = ["Producer", "ProducerPaused", "ACQUIRE_SHARE"]

# of the tightest limit per period: the largest send ``most_per_acquire`` advises (a 40th: 25 records at 1,000
# msgs/s, where sends of 100 left a 2-worker stream at 0.945 of its shared limit)
ACQUIRE_SHARE = 0.025


class ProducerPaused(TimeoutError):
    """``send()`` waited ``timeout_s`` and the producer was still paused; nothing was sent or charged."""


class _Waiter:
    __slots__ = ("event", "resumed", "loop", "future", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self.event = threading.Event()
        self.resumed = False
        self.timer = None
        self.loop = loop
        self.future: asyncio.Future | None = loop.create_future() if loop else None

    def wake(self, resumed: bool) -> None:
        if resumed:
            self.resumed = True
        self.event.set()
        if self.loop is not None:
            with suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
                self.loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result(self.resumed)


class Producer:
    """A sender under the limiters of every level that applies to it. See the module essay."""

    def __init__(
        self,
        name: str,
        limiters: Sequence[PublishRateLimiter] = (),
        *,
        clock: Clock | None = None,
        scheduler: Scheduler | None = None,
        max_pending_requests: int | None = None,
        max_pending_bytes: int | None = None,
    ):
        for label, value in (("max_pending_requests", max_pending_requests), ("max_pending_bytes", max_pending_bytes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{label} must be a whole number > 0, or None for no limit; got {value!r}")
        self.name = name
        self._limiters: tuple[PublishRateLimiter, ...] = tuple(limiters)
        self._clock = clock or SystemClock()
        self._scheduler = scheduler or scheduler_for(self._clock)
        self._lock = threading.Lock()
        self._waiters: list[_Waiter] = []
        # through a weak reference: a producer must die with its last user (a task's generator), by reference
        # counting, not at the next cyclic collection -- its limiters' shared leases are released when it does
        on_resume = weakref.WeakMethod(self._on_resume)
        self.tracker = ThrottleTracker(on_resume=lambda: (m := on_resume()) is not None and m(), name=name)
        self.max_pending_requests = max_pending_requests
        self.max_pending_bytes = max_pending_bytes
        self._pending_requests = 0
        self._pending_bytes = 0
        self._capacity_lock = threading.Lock()  # makes check-then-mark of the on/off reasons one step
        # (when, msgs) of its last send refused while paused: the send it waits to make (``waiting_send``)
        self._refused: tuple[int, float] = (-1, 0.0)
        self._coming_msgs: float | None = None   # what ``will_send`` said is in hand, less what was charged since

    @property
    def limiters(self) -> tuple[PublishRateLimiter, ...]:
        return self._limiters

    def most_per_acquire(self, share: float = ACQUIRE_SHARE) -> tuple[float, float]:
        """(msgs, bytes): ``share`` of the tightest limit of each dimension over the producer's levels (what a
        shared limit's pool holds per period, else the limit per period); ``inf`` where no level limits it.
        A send is charged whole and may overdraw (above), so each sender of a shared limit can run up to one send
        ahead of it: a sender that splits a large batch into sends of at most these keeps that error small."""
        if not 0 < share <= 1:
            raise ValueError(f"share must be a part of the limit, > 0 and <= 1, got {share!r}")
        most = [math.inf, math.inf]
        for lim in self._limiters:
            rate, pool = lim.rate, lim.capacity
            per_period = pool if pool is not None else (rate.msgs if rate.msgs_limited else 0.0,
                                                        rate.bytes if rate.bytes_limited else 0.0)
            for k, amount in enumerate(per_period):
                if amount > 0:
                    most[k] = min(most[k], amount * share)
        return most[0], most[1]

    def bind(self, limiters: Sequence[PublishRateLimiter]) -> None:
        """Replace the set of limiters (a level was attached or detached). Throttles in progress run out."""
        self._limiters = tuple(limiters)

    @property
    def paused(self) -> bool:
        return self.tracker.throttled

    # --- sending ------------------------------------------------------------------------------------------

    def try_acquire(self, msgs: float = 1, bytes: float = 0) -> bool:
        """Charge a send now if the producer is running; False (nothing charged) while it is paused, or when a
        shared limit's pool is dry (the producer is paused by it now)."""
        if self.tracker.throttled or self._held_by_dry_pool(msgs, bytes):
            self._waits_to_send(msgs)
            return False
        self._charge(msgs, bytes)
        return True

    def will_send(self, msgs: float) -> None:
        """A batch of ``msgs`` messages is in hand, to go in this producer's next sends (each charge counts it down;
        a new batch replaces what is left of the last): its shared limits' pools ask for it in one answer."""
        self._coming_msgs = float(at_least_zero("msgs", msgs, unit="messages"))

    @property
    def coming_msgs(self) -> float | None:
        """The messages ``will_send`` said are in hand that were not charged yet (None: it never said)."""
        return self._coming_msgs

    def waiting_send(self, since_ns: int) -> float | None:
        """The messages of the send it was last refused, if that was at or after ``since_ns`` (it waits to make
        it), else None: a limiter that throttled it after a send it charged knows only that send's size."""
        at, msgs = self._refused
        return msgs if at >= since_ns else None

    def _waits_to_send(self, msgs: float) -> None:
        self._refused = (self._clock.now_ns(), msgs)
        if self._coming_msgs == 0:
            # all it said was coming is charged, yet it waits to send: this send is coming too. Left at 0, a shared
            # limit's pool reads "nothing more" and, dry, asks for nothing while the send waits -- a Spark task whose
            # last Arrow batch was one send (100 rows in sends of 25, then 25) waited for ever
            self._coming_msgs = float(msgs)

    def acquire(self, msgs: float = 1, bytes: float = 0, timeout_s: float | None = None) -> bool:
        """Wait while paused (at most ``timeout_s``), then charge the send. False on timeout, nothing charged."""
        deadline = self._deadline_s(timeout_s)
        while True:
            left = None if deadline is None else max(0.0, deadline - self._clock.now_s())
            if self.tracker.throttled:
                self._waits_to_send(msgs)
                if not self._wait(left):
                    return False
            if not self._held_by_dry_pool(msgs, bytes):
                break
        self._charge(msgs, bytes)
        return True

    async def acquire_async(self, msgs: float = 1, bytes: float = 0, timeout_s: float | None = None) -> bool:
        """``acquire`` for asyncio: awaits while paused without blocking the event loop."""
        deadline = self._deadline_s(timeout_s)
        while True:
            if self.tracker.throttled:
                self._waits_to_send(msgs)
                left = None if deadline is None else max(0.0, deadline - self._clock.now_s())
                waiter = _Waiter(asyncio.get_running_loop())
                if self._register(waiter, left):
                    try:
                        await waiter.future
                    finally:
                        self._unregister(waiter)
                    if not waiter.resumed and self.tracker.throttled:
                        return False
            if not self._held_by_dry_pool(msgs, bytes):
                break
        self._charge(msgs, bytes)
        return True

    def _deadline_s(self, timeout_s: float | None) -> float | None:
        if timeout_s is not None and not timeout_s >= 0:
            raise ValueError(f"timeout_s must be >= 0 or None (wait as long as it takes), got {timeout_s!r}")
        return None if timeout_s is None else self._clock.now_s() + timeout_s

    def _held_by_dry_pool(self, msgs: float, bytes: float) -> bool:
        return any(limiter.hold_if_dry(self, msgs, bytes) for limiter in self._limiters)

    @contextmanager
    def send(self, msgs: float = 1, bytes: float = 0, timeout_s: float | None = None) -> Iterator[None]:
        """Acquire, and count the request as pending (capacity reasons) until the block exits."""
        if not self.acquire(msgs, bytes, timeout_s):
            raise ProducerPaused(f"producer {self.name!r} still paused after {timeout_s} s; nothing was sent")
        self._add_pending(1, bytes)
        try:
            yield
        finally:
            self._add_pending(-1, -bytes)

    def _charge(self, msgs: float, bytes: float) -> None:
        for limiter in self._limiters:
            limiter.handle_publish_throttling(self, msgs, bytes)
        if self._coming_msgs:   # (after the charge: a pool read between the two over-asks, it does not under-ask)
            self._coming_msgs = max(0.0, self._coming_msgs - msgs)

    # --- waiting ------------------------------------------------------------------------------------------

    def _wait(self, timeout_s: float | None) -> bool:
        waiter = _Waiter()
        if not self._register(waiter, timeout_s):
            return True
        try:
            waiter.event.wait()
        finally:
            self._unregister(waiter)
        return waiter.resumed or not self.tracker.throttled

    def _register(self, waiter: _Waiter, timeout_s: float | None) -> bool:
        """Register a waiter; False if the producer is running already (no need to wait)."""
        if timeout_s is not None and timeout_s < 0:
            raise ValueError(f"timeout_s must be >= 0 or None (wait as long as it takes), got {timeout_s!r}")
        with self._lock:
            if not self.tracker.throttled:
                return False
            if timeout_s == 0:  # do not wait at all: nothing to register, the answer is "still paused"
                waiter.wake(False)
                return True
            self._waiters.append(waiter)
        if timeout_s is not None:
            waiter.timer = self._scheduler.call_later(timeout_s, lambda: waiter.wake(False))
        return True

    def _unregister(self, waiter: _Waiter) -> None:
        if waiter.timer is not None:
            waiter.timer.cancel()
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _on_resume(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.wake(True)

    # --- capacity reasons ---------------------------------------------------------------------------------

    def _add_pending(self, requests: int, bytes: float) -> None:
        with self._capacity_lock:
            self._pending_requests += requests
            self._pending_bytes += bytes
            self._capacity_reason(ThrottleReason.PENDING_PUBLISH_REQUESTS, self._pending_requests,
                                  self.max_pending_requests)
            self._capacity_reason(ThrottleReason.PUBLISH_BUFFER_MEMORY, self._pending_bytes, self.max_pending_bytes)

    def _capacity_reason(self, reason: ThrottleReason, value: float, maximum: int | None) -> None:
        if maximum is None:
            return
        on = self.tracker.count(reason) > 0
        if not on and value > maximum:
            self.tracker.mark(reason)
        elif on and value <= maximum / 2:
            self.tracker.unmark(reason)

    @property
    def pending_requests(self) -> int:
        return self._pending_requests

    @property
    def pending_bytes(self) -> float:
        return self._pending_bytes

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, levels={[f'{lim.level.value}:{lim.name}' for lim in self._limiters]})"
