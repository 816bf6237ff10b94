"""Offload throttling: PIP-211's broker-wide flow permits, in bytes per second, for bulk-copy reads.

How it works and why
--------------------
One ``OffloadThrottle`` per broker (process) limits the bytes that offload reads pull, ``bytes_per_s`` (<= 0 =
off), counted in windows of ``window_s`` (1 s) aligned to the throttle's creation. The size of a read is unknown
until it is done, so, as PIP-211 does:

1. ``before_read(entries)`` estimates the read's bytes as ``entries * average_entry_bytes()`` (the average of the
   reads recorded so far; 0 before the first one). If ``_used``, the bytes charged against the current window,
   is already at the window's limit ``L = bytes_per_s * window_s``, the read is delayed until the window ends
   (the returned ``ReadTicket.delay_s``; ``calculate_delay_s()`` answers the same without reserving). Either way
   the estimate is added to ``_used`` at once, so reads queued behind a full window reserve their place and do
   not all rush in when it ends. A read is only ever delayed by what was charged before it, never by its own
   size: one read larger than the permits runs as soon as the window it waits for opens, so nothing blocks
   forever.
2. ``after_read(ticket, actual_bytes)`` replaces the estimate with the actual bytes (``_used += actual -
   estimate``, never below 0) and updates the counters; ``read_failed(ticket)`` gives the estimate back.
3. When windows end, ``_used`` drops by ``L`` per window, never below 0. Bytes beyond one window's limit are
   thus carried into the next windows (a 3 MB read at 1 MB/s holds the next reads back about 3 s). Pulsar's
   merged code resets its counter every window instead, which lets reads bigger than the limit run at one read
   per window whatever their size; carrying the excess keeps the long-run rate at the limit.

``ThrottledReader`` wraps a file-like object (``read``, ``readinto``; everything else is delegated) and
``throttled_chunks`` an iterator of byte chunks (each ``next`` is one read). Both wait through an injectable
``sleep`` (default: the throttle's ``clock.sleep``), so tests on a ManualClock pass ``clock.advance``.

Worked example (bytes_per_s=1000, window_s=1, so L=1000)
--------------------------------------------------------
t=0.0  before_read(): _used 0 < 1000 -> delay 0; estimate 0 (no average yet). after_read(600): _used 600.
t=0.1  before_read(): 600 < 1000 -> delay 0; estimate 600 -> _used 1200. after_read(700): _used 1300, avg 650.
t=0.2  before_read(): 1300 >= 1000 -> wait for window 1: delay 0.8 s, reads_limited 1; _used 1950.
t=0.3  before_read(): 1950 -> window 1 as well (1950 - 1000 < 1000): delay 0.7 s; _used 2600.
t=0.4  before_read(): 2600 -> window 2 (2600 - 2*1000 < 1000): delay 1.6 s; _used 3250.
t=1.0  window 0 ended: _used 3250 - 1000 = 2250: windows 1 and 2 are spoken for, a read now waits 2 s.

Consistency rules
-----------------
1. Every read is charged exactly once: its estimate at ``before_read``, corrected to the actual bytes at
   ``after_read`` (or returned at ``read_failed``). All state changes happen under one lock.
2. A read waits only for windows that bytes charged before it have filled; the delay is always finite.
3. A live change of ``bytes_per_s`` applies to the next decision; charged bytes are kept (0 or less turns the
   limit off and delays nothing, while the counters keep counting).

Metrics (``snapshot()`` -> ``OffloadStats``): ``reads_limited`` (brk_ledgeroffloader_ledger_offload_limited),
``offload_time_s`` (_ledger_offload_time: time from asking to read to the bytes being there, delays included),
``reading_max_bytes`` (_ledger_reading_max_bytes: the most bytes read in one window), ``offload_rate_bytes_per_s``
(_offload_rate: the bytes read in the last complete window per second) and ``errors`` (_offload_error).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .checks import at_least_zero, finite, positive
from .clock import NS_PER_S, Clock, SystemClock, seconds_to_ns

__all__ = ["OffloadThrottle", "OffloadStats", "ReadTicket", "ThrottledReader", "throttled_chunks"]


def _limit(value: Any) -> float:
    return float(finite("bytes_per_s", value, rule=" (> 0 limits, <= 0 turns the limit off)"))


@dataclass(frozen=True, slots=True)
class ReadTicket:
    """One admitted read: wait ``delay_s`` first, then report it with ``after_read`` or ``read_failed``."""

    delay_s: float
    estimate_bytes: float
    entries: int
    start_ns: int


@dataclass(frozen=True, slots=True)
class OffloadStats:
    bytes_per_s: float
    reads_total: int
    reads_limited: int
    errors: int
    bytes_total: int
    offload_time_s: float
    delay_time_s: float
    reading_max_bytes: int
    offload_rate_bytes_per_s: float
    window_bytes: int


class OffloadThrottle:
    """A broker-wide bytes/s flow-permit limit for offload reads (PIP-211; see the module essay)."""

    def __init__(self, bytes_per_s: float, window_s: float = 1.0, clock: Clock | None = None):
        positive("window_s", window_s, unit="seconds")
        self.clock = clock or SystemClock()
        self._bytes_per_s = _limit(bytes_per_s)
        self._window_ns = seconds_to_ns(window_s)
        self._lock = threading.Lock()
        self._origin_ns = self.clock.now_ns()
        self._window = 0          # index of the current window
        self._used = 0.0          # bytes charged against the current window (may exceed its limit)
        self._window_bytes = 0    # actual bytes read in the current window (metrics)
        self._last_window_bytes = 0
        self._max_window_bytes = 0
        self._entries_read = 0
        self._bytes_total = 0
        self._reads_total = self._reads_limited = self._errors = 0
        self._offload_ns = self._delay_ns = 0

    # --- the decision -------------------------------------------------------------------------------------

    def calculate_delay_s(self) -> float:
        """How long a read asked for now would wait (0 = at once). Reserves nothing."""
        with self._lock:
            return self._wait_ns(self._roll()) / NS_PER_S

    def before_read(self, entries: int = 1, estimate_bytes: float | None = None) -> ReadTicket:
        """Admit a read of ``entries`` entries: charge its estimate and say how long to wait first."""
        if isinstance(entries, bool) or not isinstance(entries, int) or entries < 0:
            raise ValueError(f"entries must be an integer >= 0, got {entries!r}")
        if estimate_bytes is not None:
            at_least_zero("estimate_bytes", estimate_bytes, rule=" or None")
        with self._lock:
            now = self._roll()
            delay_ns = self._wait_ns(now)
            if estimate_bytes is None:
                average = self._bytes_total / self._entries_read if self._entries_read else 0.0
                estimate_bytes = math.ceil(entries * average)  # whole bytes: integer limits stay exact
            self._used += estimate_bytes  # even when delayed: it reserves its place in a later window
            if delay_ns:
                self._reads_limited += 1
                self._delay_ns += delay_ns
            return ReadTicket(delay_ns / NS_PER_S, estimate_bytes, entries, now)

    def after_read(self, ticket: ReadTicket, actual_bytes: int) -> None:
        """Record what the read really returned (replacing its estimate)."""
        if isinstance(actual_bytes, bool) or not isinstance(actual_bytes, int) or actual_bytes < 0:
            raise ValueError(f"actual_bytes must be an integer >= 0, got {actual_bytes!r}")
        with self._lock:
            self._finish(ticket, actual_bytes)
            self._reads_total += 1
            self._entries_read += ticket.entries
            self._bytes_total += actual_bytes
            self._window_bytes += actual_bytes
            self._max_window_bytes = max(self._max_window_bytes, self._window_bytes)

    def read_failed(self, ticket: ReadTicket) -> None:
        """The read raised: count the error and give its estimate back."""
        with self._lock:
            self._finish(ticket, 0)
            self._errors += 1

    def cancel_read(self, ticket: ReadTicket) -> None:
        """The read did not happen (e.g. the end of a stream): give its estimate back, count nothing."""
        with self._lock:
            self._roll()
            self._used = max(0.0, self._used - ticket.estimate_bytes)

    def average_entry_bytes(self) -> float | None:
        with self._lock:
            return self._bytes_total / self._entries_read if self._entries_read else None

    # --- live change and metrics --------------------------------------------------------------------------

    @property
    def bytes_per_s(self) -> float:
        return self._bytes_per_s

    @bytes_per_s.setter
    def bytes_per_s(self, value: float) -> None:
        value = _limit(value)
        with self._lock:
            self._roll()  # windows that ended are drained at the old limit
            self._bytes_per_s = value

    @property
    def window_s(self) -> float:
        return self._window_ns / NS_PER_S

    def snapshot(self) -> OffloadStats:
        with self._lock:
            self._roll()
            return OffloadStats(
                self._bytes_per_s, self._reads_total, self._reads_limited, self._errors, self._bytes_total,
                self._offload_ns / NS_PER_S, self._delay_ns / NS_PER_S, self._max_window_bytes,
                self._last_window_bytes / self.window_s, self._window_bytes)

    def __repr__(self) -> str:
        return f"OffloadThrottle(bytes_per_s={self._bytes_per_s}, window_s={self.window_s}, used~{self._used:g})"

    # --- internals (under the lock) -----------------------------------------------------------------------

    def _roll(self) -> int:
        now = self.clock.now_ns()
        window = max(self._window, (now - self._origin_ns) // self._window_ns)
        if window > self._window:
            ended = window - self._window
            if self._bytes_per_s > 0:
                self._used = max(0.0, self._used - ended * self._bytes_per_s * self.window_s)
            else:
                self._used = 0.0
            self._last_window_bytes = self._window_bytes if ended == 1 else 0
            self._window_bytes = 0
            self._window = window
        return now

    def _wait_ns(self, now: int) -> int:
        if self._bytes_per_s <= 0:
            return 0
        per_window = self._bytes_per_s * self.window_s
        full = math.floor(self._used / per_window + 1e-9)  # windows filled by earlier charges (float-safe)
        if full == 0:
            return 0
        return max(0, self._origin_ns + (self._window + full) * self._window_ns - now)

    def _finish(self, ticket: ReadTicket, actual_bytes: int) -> None:
        now = self._roll()
        self._used = max(0.0, self._used + actual_bytes - ticket.estimate_bytes)
        self._offload_ns += max(0, now - ticket.start_ns)


class ThrottledReader:
    """A file-like wrapper whose ``read``/``readinto`` wait for the offload throttle. Other calls delegate."""

    def __init__(self, raw: Any, throttle: OffloadThrottle, sleep: Callable[[float], Any] | None = None):
        self._raw = raw
        self._throttle = throttle
        self._sleep = sleep or throttle.clock.sleep

    def _admit(self, size: int) -> ReadTicket:
        average = self._throttle.average_entry_bytes()
        estimate = (size if size > 0 else 0.0) if average is None else average
        ticket = self._throttle.before_read(1, min(estimate, size) if size >= 0 else estimate)
        if ticket.delay_s > 0:
            self._sleep(ticket.delay_s)
        return ticket

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            return self._raw.read(0)
        ticket = self._admit(-1 if size is None else size)
        try:
            data = self._raw.read(size)
        except BaseException:
            self._throttle.read_failed(ticket)
            raise
        self._throttle.after_read(ticket, len(data) if data else 0)
        return data

    def readinto(self, buffer: Any) -> int | None:
        ticket = self._admit(len(memoryview(buffer).cast("B")))
        try:
            count = self._raw.readinto(buffer)
        except BaseException:
            self._throttle.read_failed(ticket)
            raise
        self._throttle.after_read(ticket, count or 0)
        return count

    def readable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def __enter__(self) -> ThrottledReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()


def throttled_chunks(chunks: Iterable[bytes], throttle: OffloadThrottle,
                     sleep: Callable[[float], Any] | None = None) -> Iterator[bytes]:
    """Yield the chunks, each pulled (read) only once the throttle admits it; records each chunk's size."""
    sleep = sleep or throttle.clock.sleep
    iterator = iter(chunks)
    while True:
        ticket = throttle.before_read(1)
        if ticket.delay_s > 0:
            sleep(ticket.delay_s)
        try:
            chunk = next(iterator)
        except StopIteration:
            throttle.cancel_read(ticket)
            return
        except BaseException:
            throttle.read_failed(ticket)
            raise
        throttle.after_read(ticket, len(chunk))
        yield chunk
