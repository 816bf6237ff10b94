"""Prometheus's scrapes of ``/metrics``: rendered on the event loop a piece at a time, and at most so often.

On the loop, a piece at a time
------------------------------
``prometheus_client.generate_latest`` renders a registry in one call, and a plain endpoint runs it on a worker
thread beside the event loop that answers reports. Python's threads share the interpreter lock: the loop gives it
up at every socket call and waits for it back each time, so while a scrape ran (1.2-1.6 s at 1,000 participants of
100 shared limits: 4.7 MB, 47,000 lines) the reports queued, and with ``deploy/prometheus.yml`` scraping every 5 s
their p99 went from 36 ms to 723 ms. ``Scrapes.text`` runs the scrape on the loop: the collector pauses every
``STEP_ENTRIES`` entries (``ThrottlescopeCollector.collect_steps``), each family is rendered
``SAMPLES_PER_PIECE`` samples at a time (``metrics.exposition.pieces``: joined, the client library's own text, byte
for byte), and between pieces the loop answers what came. The same scrape then read a p99 of 25 ms.

At most so often
----------------
A scrape's CPU grows with participants x limits: 0.7 s at 1,000 x 100, about 2 s at 3,000 x 100 -- every 5 s, 40 %
of the core that answers reports, and that cell, able to settle at a report every 10 s before, never settled. So
rendering is held to ``share`` (0.1) of a core: a render that took ``cpu_s`` of the loop's CPU (``thread_time``
over its own steps) is handed out again, as it was, to scrapes that come within ``cpu_s / share`` of its start.
1,000 x 100: a fresh render every 7 s at most instead of 5; 3,000 x 100 every 21 s. Prometheus then reads the same
samples twice, which its ``rate()`` takes in its stride (counters never go backwards: an older render is an
earlier state). A render under ``FRESH_BELOW_CPU_S`` (50 ms: the demo's take a few) is never reused: a scrape right
after a report shows it. The last render's CPU is on ``/healthz`` (``scrapeCpuSeconds``).

Not thread-safe: the scrapes are answered on the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from metrics.collector import ThrottlescopeCollector
from metrics.exposition import pieces

__all__ = ["Scrapes", "Rendered", "SCRAPE_SHARE", "FRESH_BELOW_CPU_S", "SEND_BYTES"]

SCRAPE_SHARE = 0.1          # of a core: what rendering scrapes may take, on average
FRESH_BELOW_CPU_S = 0.05    # a render that took less is never handed out again
SEND_BYTES = 256 * 1024     # a reused render goes out in pieces of this size (each gzipped in turn)


@dataclass(frozen=True)
class Rendered:
    started_s: float   # on the monotonic clock
    cpu_s: float       # the loop's CPU for the render's own steps
    text: bytes


def rendered_pieces(collector: ThrottlescopeCollector) -> Iterator[bytes | None]:
    """The scrape's text in pieces, with ``None`` where the collector pauses."""
    for family in collector.collect_steps():
        if family is None:
            yield None
        else:
            yield from pieces(family)


class Scrapes:
    """See the module essay. ``clock``: monotonic seconds; ``cpu_clock``: the CPU seconds of the thread that
    renders (the event loop's)."""

    def __init__(self, collector: ThrottlescopeCollector, *, share: float = SCRAPE_SHARE,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be a fraction of a core > 0 and <= 1, got {share!r}")
        self._collector, self.share = collector, share
        self._clock, self._cpu_clock = clock, cpu_clock
        self.last: Rendered | None = None

    def reusable(self) -> Rendered | None:
        """The last render, while a new one would take rendering past ``share`` of a core (None: render anew)."""
        last = self.last
        if last is None or last.cpu_s < FRESH_BELOW_CPU_S:
            return None
        return last if self._clock() < last.started_s + last.cpu_s / self.share else None

    async def text(self) -> AsyncIterator[bytes]:
        """One scrape's text, in pieces, letting the loop answer others between them."""
        last = self.reusable()
        if last is not None:
            for start in range(0, len(last.text), SEND_BYTES):
                yield last.text[start:start + SEND_BYTES]
                await asyncio.sleep(0)
            return
        started_s, cpu_s, kept = self._clock(), 0.0, []
        steps = rendered_pieces(self._collector)
        while True:
            before = self._cpu_clock()
            piece = next(steps, b"")
            cpu_s += self._cpu_clock() - before
            if piece == b"":   # (every piece holds at least a line)
                break
            if piece is not None:
                kept.append(piece)
                yield piece
            await asyncio.sleep(0)
        self.last = Rendered(started_s, cpu_s, b"".join(kept))
