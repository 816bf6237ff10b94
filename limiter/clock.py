"""Time behind one small interface: reading, and waiting.

Every limiter in this package reads time through a ``Clock`` and waits through a ``Scheduler``; nothing calls
``time`` directly. That is what lets the tests run on a ``ManualClock`` and never sleep.

The interface
-------------
``now_ns()``       the precise, monotonic time in integer nanoseconds. It never goes backwards in what it returns.
``snapshot_ns()``  a cheap read for the hot path. It may lag ``now_ns()`` a little, never run ahead of it.
``call_later(delay_s, fn)``  run ``fn`` once, ``delay_s`` seconds from now; returns a handle with ``cancel()``.
``sleep(seconds)`` block the calling thread until the clock has moved ``seconds`` on.

``tick_cell``       a one-element list whose item is a recent ``now_ns`` reading. The hot path reads
                   ``tick_cell[0]`` -- an attribute and an index, no call -- instead of asking the OS.

``SystemClock`` reads ``time.monotonic_ns`` (CLOCK_MONOTONIC: no leaps from NTP or a changed wall clock) and
additionally publishes only increasing values from ``now_ns()``, as Pulsar's clock source does since its fix for
inconsistent clocks (#23930). Its ``tick_cell`` is refreshed every ``TICK_S`` (2 ms) by one daemon thread per
process, Pulsar's snapshot clock: on this kind of machine a ``time.monotonic_ns()`` call costs about 1.5 no-op
method calls, more than the whole rest of a token bucket's fast path, while reading the cell costs a fraction
of one. The thread starts on first use and again in a forked child (PySpark forks its Python workers). A tick
may lag by ``TICK_S`` plus however long the thread waits for the GIL; the token bucket's resolution (16 ms)
absorbs that, and every consistent read (``tokens()``) uses the precise ``now_ns()``.
The thread parks after ``PARK_AFTER_S`` of ticking: it writes ``PARKED`` (0) into the cell and waits. A reader that
finds the cell parked reads the precise clock instead (``SystemClock.snapshot_ns``, which the token bucket's hot
path falls back to: one test of the value more) and wakes the thread, which ticks again. A busy process pays one
precise read in a hundred milliseconds and the few reads before the thread runs again; an idle one -- a PySpark
Python worker between tasks, sixteen of them on a two-core host -- pays nothing: ticking on, each took 12 ms of CPU
a second at 490 wake-ups a second, and the sixteen workers' ticks (0.2 of a core) lengthened Spark's gap between
two micro-batches (a stream of sixteen workers, ours and a static split of our buckets 0.06 s longer than Redis's
and no limiter's, which tick nothing). A forked child starts with the cell parked, so its first read starts its
own thread.
Consumers that compare two readings must tolerate a reading older than one they already saw (another thread
may have read later and published first); ``AsyncTokenBucket`` treats a negative elapsed time as zero.

``ManualClock`` is Twisted's ``task.Clock`` idea: time moves only when a test calls ``advance``; callbacks
scheduled with ``call_later`` run inside ``advance``, in due order, each seeing the clock at its own due time;
``sleep`` on another thread returns once a test has advanced the clock far enough.
"""

from __future__ import annotations

import heapq
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "Scheduler", "TimerHandle", "SystemClock", "ManualClock", "ThreadScheduler", "scheduler_for",
           "TICK_LAG_S", "PARK_AFTER_S", "PARKED"]

NS_PER_S = 1_000_000_000
TICK_S = 0.002
# the ticker parks after this long and waits for a reader that finds the cell PARKED (see the module doc)
PARK_AFTER_S = 0.1
PARKED = 0
# how far a tick read may lag the clock: the ticker's sleep, and one GIL switch interval it may wait to run in a
# busy process (a time read from a tick, plus this, is at or after the moment it was read)
TICK_LAG_S = TICK_S + sys.getswitchinterval()


def seconds_to_ns(seconds: float) -> int:
    return int(round(seconds * NS_PER_S))


class TimerHandle:
    """A scheduled callback; ``cancel()`` makes sure it will not run (a no-op once it ran)."""

    __slots__ = ("due_ns", "fn", "cancelled")

    def __init__(self, due_ns: int, fn: Callable[[], None]):
        self.due_ns = due_ns
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@runtime_checkable
class Clock(Protocol):
    tick_cell: list[int]

    def now_ns(self) -> int: ...

    def snapshot_ns(self) -> int: ...

    def sleep(self, seconds: float) -> None: ...


@runtime_checkable
class Scheduler(Protocol):
    def now_ns(self) -> int: ...

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle: ...


class _TimerHeap:
    """Due-ordered callbacks; ties keep insertion order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerHandle]] = []
        self._seq = itertools.count()

    def push(self, handle: TimerHandle) -> None:
        heapq.heappush(self._heap, (handle.due_ns, next(self._seq), handle))

    def pop_due(self, now_ns: int) -> TimerHandle | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        if self._heap and self._heap[0][0] <= now_ns:
            return heapq.heappop(self._heap)[2]
        return None

    def next_due_ns(self) -> int | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return sum(1 for _, _, h in self._heap if not h.cancelled)


class _ProcessTicker:
    """One daemon thread per process that keeps ``cell[0]`` at a recent ``time.monotonic_ns()`` while it is read,
    and ``PARKED`` while it is not (see the module doc)."""

    cell: list[int] = [PARKED]
    _thread: threading.Thread | None = None
    _pid = -1
    _lock = threading.Lock()
    _wake = threading.Event()

    @classmethod
    def ensure_running(cls) -> list[int]:
        if cls._thread is None or cls._pid != os.getpid():
            with cls._lock:
                if cls._thread is None or cls._pid != os.getpid():
                    cls.cell[0] = time.monotonic_ns()
                    cls._pid = os.getpid()
                    cls._thread = threading.Thread(target=cls._run, name="throttlescope-tick", daemon=True)
                    cls._thread.start()
        return cls.cell

    @classmethod
    def read_parked(cls) -> int:
        """The precise time, for a reader that found the cell parked; wakes the thread."""
        if not cls._wake.is_set():
            cls._wake.set()
        return time.monotonic_ns()

    @classmethod
    def _run(cls) -> None:
        cell, now, sleep, pid, wake = cls.cell, time.monotonic_ns, time.sleep, os.getpid(), cls._wake
        ticks = max(1, round(PARK_AFTER_S / TICK_S))
        while cls._pid == pid:
            for _ in range(ticks):
                cell[0] = now()
                sleep(TICK_S)
            wake.clear()   # (before the cell says parked: a reader that sees it parked sets the event after this)
            cell[0] = PARKED
            wake.wait()

    @classmethod
    def _after_fork_in_child(cls) -> None:
        cls._thread = None  # threads do not survive fork(); the next ensure_running() starts a fresh one
        cls._lock = threading.Lock()
        cls._wake = threading.Event()
        cls.cell[0] = PARKED   # (the parent's last tick would read as the time: the first read starts the thread)


os.register_at_fork(after_in_child=_ProcessTicker._after_fork_in_child)


class SystemClock:
    """The real monotonic clock. ``now_ns`` never returns less than it returned before."""

    def __init__(self) -> None:
        self._last_ns = 0
        self._lock = threading.Lock()

    @property
    def tick_cell(self) -> list[int]:
        return _ProcessTicker.ensure_running()

    def snapshot_ns(self) -> int:
        return _ProcessTicker.ensure_running()[0] or _ProcessTicker.read_parked()

    def now_ns(self) -> int:
        now = time.monotonic_ns()
        with self._lock:
            if now < self._last_ns:
                return self._last_ns
            self._last_ns = now
            return now

    def now_s(self) -> float:
        return self.now_ns() / NS_PER_S

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to; also a ``Scheduler`` whose callbacks run inside ``advance``."""

    def __init__(self, start_s: float = 0.0):
        if start_s < 0:
            raise ValueError(f"start_s must be >= 0, got {start_s!r}")
        self._now_ns = seconds_to_ns(start_s)
        self.tick_cell = [self._now_ns]
        self._timers = _TimerHeap()
        self._cond = threading.Condition()
        self._advancing = threading.Lock()

    def now_ns(self) -> int:
        return self._now_ns

    def snapshot_ns(self) -> int:
        return self._now_ns

    def now_s(self) -> float:
        return self._now_ns / NS_PER_S

    def advance(self, seconds: float) -> None:
        """Move time forward, running every callback that falls due on the way, each at its own due time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards: advance({seconds!r})")
        with self._advancing:
            target = self._now_ns + seconds_to_ns(seconds)
            while True:
                with self._cond:
                    handle = self._timers.pop_due(target)
                    if handle is None:
                        self._now_ns = target
                        self.tick_cell[0] = target
                        self._cond.notify_all()
                        return
                    self._now_ns = max(self._now_ns, handle.due_ns)
                    self.tick_cell[0] = self._now_ns
                    self._cond.notify_all()
                # Run outside the condition: a callback may schedule more work or wake sleepers.
                handle.fn()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        with self._cond:
            handle = TimerHandle(self._now_ns + max(0, seconds_to_ns(delay_s)), fn)
            self._timers.push(handle)
            return handle

    def pending_timers(self) -> int:
        with self._cond:
            return len(self._timers)

    def sleep(self, seconds: float) -> None:
        """Block until another thread has advanced this clock by ``seconds``."""
        with self._cond:
            target = self._now_ns + seconds_to_ns(seconds)
            while self._now_ns < target:
                self._cond.wait()

    def __repr__(self) -> str:
        return f"ManualClock(now_s={self.now_s():.9f})"


MAX_TIMER_WAIT_S = 60.0   # the timer thread wakes at least this often (new timers wake it at once)


class ThreadScheduler:
    """Runs callbacks on one daemon timer thread, by the given clock's ``now_ns``.

    One thread serves every limiter that shares this scheduler; callbacks must be short and must not block.
    An exception in a callback is reported through ``threading.excepthook`` and does not stop the thread.
    """

    def __init__(self, clock: Clock | None = None, name: str = "throttlescope-timer"):
        self._clock = clock or SystemClock()
        self._timers = _TimerHeap()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def now_ns(self) -> int:
        return self._clock.now_ns()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(self._clock.now_ns() + max(0, seconds_to_ns(delay_s)), fn)
        with self._cond:
            self._timers.push(handle)
            self._cond.notify()
        return handle

    def _run(self) -> None:
        while True:
            with self._cond:
                handle = self._timers.pop_due(self._clock.now_ns())
                if handle is None:
                    due = self._timers.next_due_ns()
                    # capped: a timer years away (a deficit at a pool's near-zero own refill) would overflow the
                    # platform's time_t in ``wait`` and kill the thread every limiter of the process relies on
                    wait_s = MAX_TIMER_WAIT_S if due is None else \
                        min(MAX_TIMER_WAIT_S, max(0.0, (due - self._clock.now_ns()) / NS_PER_S))
                    self._cond.wait(wait_s)
                    continue
            try:
                handle.fn()
            except Exception:  # noqa: BLE001 - a failing callback must not kill the shared timer thread
                threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), self._thread)))


_default_scheduler: ThreadScheduler | None = None
_default_lock = threading.Lock()


def scheduler_for(clock: Clock) -> Scheduler:
    """The scheduler that goes with ``clock``: a ManualClock schedules for itself; live clocks share one thread."""
    global _default_scheduler
    if isinstance(clock, ManualClock):
        return clock
    if isinstance(clock, SystemClock):
        with _default_lock:
            if _default_scheduler is None:
                _default_scheduler = ThreadScheduler(SystemClock())
            return _default_scheduler
    return ThreadScheduler(clock)
