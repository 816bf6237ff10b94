"""Keeping CPython's cyclic garbage collector off the report path.

Why
---
The control plane holds each participant's latest report (a pydantic tree: a few dozen GC-tracked objects a shared
limit it reports, a set and a dict with each model) and replaces it every interval. The collector's young
generation is collected when its *count* passes a threshold, and that count is allocations less deallocations of
any generation: at steady state each new report frees the one it replaces, the count stands still, and the young
list fills with every participant's latest report until something tips it over. The collection that then runs scans
them all: 1,000 participants of 10 shared limits, about 480,000 objects, 215-240 ms in which no report was answered
(``benchmarks/bench_scale.py``'s curve: p99 143-430 ms at 1,000 reports a second, 65 % of a core). CPython's
default thresholds pause as long, more often (200-300 ms for 1,000 participants of one limit). Reports hold no
reference cycles: reference counting frees them, and the collector only ever finds the rare cycle (none in ten
seconds of that load; 29 objects at start-up).

How
---
``HeapFreezer.start`` collects once and freezes everything allocated at start-up (modules, the app, pydantic's
schemas: ``gc.freeze()`` moves them out of the collector's sight). Then every ``freeze_every_s`` (0.1 s) ``tick``
freezes what was allocated since -- a list splice, O(1) -- so the young generation never holds more than a tenth
of a second of allocations, and an object that lives longer is never scanned again; frozen objects are still
freed by reference counting as before. ``YOUNG_THRESHOLD`` (net objects) keeps the young collection for bursts
within one tick.

Cycles do happen: FastAPI's error path leaves each refused request's exception and traceback in one (a flood of
reports answered 422, 1,400 a second, made 100,000 objects of cyclic garbage a second). Frozen, they would wait for
a full collection. So every ``sweep_every_s`` (1 s) a tick first collects the young generation -- what died in
cycles in the last tenth of a second; a pause of 20-27 ms at most at 1,000 participants of 10 limits -- and while a
sweep finds any, every tick sweeps, until one finds none. Sweeping at every tick cost 20 % more CPU a report at 10
limits (each report's objects scanned once: 0.72 ms against 0.59) and a p99 of 16-21 ms; once a second costs nothing
that shows (0.58-0.59 ms), and the flood left 600-10,000 objects a second frozen in cycles instead of 100,000.

What dies in a cycle after it was frozen is left for a full collection (unfreeze, collect everything, freeze again),
which ``tick`` runs when the heap has grown ``growth`` times (2) since the last one -- read in pymalloc's count of
allocated blocks, ``sys.getallocatedblocks()``, kept per arena: 0.1 ms at 3.5 million blocks (counting the frozen
list walks it: 50-60 ms at half a million objects, a pause of its own), but 2.7 ms at the 3-GB heap of 100
participants of 5,000 limits, which read at every tick took 2.7 % of the core (py-spy), so it is read at most once
every ``sweep_every_s`` -- and no sooner than ``min_interval_s`` (60 s) after the last one or the start. The full
collection pauses the process about a microsecond an object (0.4-0.6 s at 1,000 participants of 10 limits), so those
pauses come at most once a minute, and only while the heap grows -- participants joining, the history of the last 15
minutes filling, a flood of refusals -- not at steady state.

That pause grows with the heap, and a heap that grows because it holds more (participants of many limits, each
limiter's history filling) is collected as often as one that grows with garbage: 1,000 participants of 100 limits
hold 2.1 million objects (10 million blocks), whose full collection 63 s after the start paused every report 2.45 s
and found 419 objects (the curve cell read a p99 of 2,393 ms). So the interval between full collections is also at
least the pause it expects over ``pause_share`` (0.005): ``blocks x seconds_per_block / pause_share``, where
``seconds_per_block`` is what the last full collection took a block (``FULL_S_PER_BLOCK``, 0.25 us, before the
first). Full collections then take at most half a percent of the time, so fewer than one report in a hundred waits
on one and the p99 does not see them. With 0.25 us a block: every 60 s up to 1.2 million blocks, every 85 s at the
1.7 million of 1,000 participants of 10 limits, every 8 minutes at 10 million. What it gives up: cycles frozen
during a flood of refusals wait that much longer at a large heap. With the rule, that cell (told 6 s, measured 82-90
s after the start) read a p99 of 27 ms, no full collection run.

Measured on ``benchmarks/bench_scale.py``'s curve cell of 1,000 participants of 10 limits, one report a second
each, 20 s: a p99 of 4.7-6.3 ms and 0.58-0.59 ms of CPU a report (before: a p99 of 143-430 ms, a young collection
of 215-240 ms every 6 s or so, 0.61-0.65 ms). Over 240 s of it: one full collection, 0.43 s, 60 s after the start
(the participants joining had grown the heap from 308,000 blocks to 1.7 million), sweeps of 20-27 ms at most, and
no cycle found by them. What it costs where there was no such pause: ``benchmarks/bench_load.py``'s 1,000
participants of one limit, 60 s, a run of each: a p99 of 3.3 ms and 0.45 ms of CPU a report (before: 2.1 ms,
0.43 ms); its longest answer waits on the full collection of the participants' joining, 60 s after the start
(265 ms in the README's run).
"""

from __future__ import annotations

import gc
import math
import sys
import threading
import time
from collections.abc import Callable

from limiter.checks import is_number, positive

__all__ = ["HeapFreezer", "YOUNG_THRESHOLD", "FULL_S_PER_BLOCK"]

YOUNG_THRESHOLD = 50_000   # net objects the young generation may gain within one tick before it is collected
FULL_S_PER_BLOCK = 0.25e-6   # a full collection's pause an allocated block, until one is measured (10 M: 2.45 s)


class HeapFreezer:
    """Freezes the heap every ``freeze_every_s`` on a daemon thread, and collects it whole when it grew ``growth``
    times, at most once every ``min_interval_s`` and so rarely that its pauses take at most ``pause_share`` of the
    time (see the module essay). ``tick`` is the whole rule, callable without the thread; ``clock`` gives monotonic
    seconds (a pause is measured on ``time.perf_counter``)."""

    def __init__(self, freeze_every_s: float = 0.1, sweep_every_s: float = 1.0, growth: float = 2.0,
                 min_interval_s: float = 60.0, pause_share: float = 0.005,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for name, value in (("freeze_every_s", freeze_every_s), ("sweep_every_s", sweep_every_s),
                            ("min_interval_s", min_interval_s)):
            positive(name, value, unit="seconds")
        if not (is_number(growth) and growth > 1):
            raise ValueError(f"growth must be a finite number > 1 (times the heap after the last full collection), "
                             f"got {growth!r}")
        if not (is_number(pause_share) and 0 < pause_share <= 1):
            raise ValueError(f"pause_share must be a finite number > 0 and <= 1 (of the time full collections may "
                             f"pause the process), got {pause_share!r}")
        self.freeze_every_s, self.growth, self.min_interval_s = freeze_every_s, growth, min_interval_s
        self.pause_share = pause_share
        self.seconds_per_block = FULL_S_PER_BLOCK   # the last full collection's pause a block
        self.last_pause_s = 0.0
        self.clock = clock
        self._ticks_a_sweep = max(1, round(sweep_every_s / freeze_every_s))
        self._blocks_every_s = sweep_every_s   # the heap's size read at most this often (see the module essay)
        self._blocks_read_at = -math.inf
        self._ticks = 0
        self.sweeping = False          # the last sweep found cycles: every tick sweeps until one finds none
        self.swept = 0                 # objects the sweeps freed
        self.blocks_after_full = 0     # pymalloc's allocated blocks right after the last full collection
        self.full_at_s = 0.0
        self.full_collections = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._threshold_before = gc.get_threshold()

    def start(self, thread: bool = True) -> HeapFreezer:
        """Collects and freezes what start-up left, and (``thread``) ticks every ``freeze_every_s`` from now."""
        self._threshold_before = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(YOUNG_THRESHOLD, 10, 10)
        self.blocks_after_full, self.full_at_s = sys.getallocatedblocks(), self.clock()
        if thread:
            self._thread = threading.Thread(target=self._run, name="heap-freezer", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the thread and hands the heap back to the collector as it was before ``start`` (its thresholds;
        everything frozen since goes to the oldest generation): for a process that goes on without the policy."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        gc.unfreeze()
        gc.set_threshold(*self._threshold_before)

    def tick(self) -> bool:
        """Sweeps the young generation every ``sweep_every_s`` (every tick while sweeps find cycles), freezes what
        was allocated since the last tick, then collects everything if the heap grew ``growth`` times and the last
        full collection is ``full_interval_s`` old. True when it collected everything."""
        self._ticks += 1
        if self.sweeping or self._ticks % self._ticks_a_sweep == 0:
            found = gc.collect(0)   # cycles that died since the last tick (a refused request's traceback)
            self.sweeping, self.swept = found > 0, self.swept + found
        gc.freeze()                 # what lives on (the latest reports) is never scanned again
        now = self.clock()
        if now - self.full_at_s < self.min_interval_s or now - self._blocks_read_at < self._blocks_every_s:
            return False
        self._blocks_read_at = now
        blocks = sys.getallocatedblocks()   # (read once the least interval passed)
        if blocks < self.growth * self.blocks_after_full or now - self.full_at_s < self.full_interval_s(blocks):
            return False
        gc.unfreeze()
        started = time.perf_counter()
        gc.collect()
        self.last_pause_s = time.perf_counter() - started
        gc.freeze()
        self.seconds_per_block = self.last_pause_s / blocks
        self.blocks_after_full, self.full_at_s = sys.getallocatedblocks(), now
        self.full_collections += 1
        return True

    def full_interval_s(self, blocks: int) -> float:
        """The least time between full collections at a heap of ``blocks``: ``min_interval_s``, or the pause one
        would take there (at the last one's pause a block) over ``pause_share``, whichever is longer."""
        return max(self.min_interval_s, blocks * self.seconds_per_block / self.pause_share)

    def _run(self) -> None:
        while not self._stop.wait(self.freeze_every_s):
            self.tick()
