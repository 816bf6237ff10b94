"""Prometheus's scrapes of ``/metrics``: rendered on the event loop a piece at a time, and at most so often
(``controlplane.renders`` says how and why).

On a worker thread, as a plain endpoint runs it, a scrape held up the reports for its whole length: 1.2-1.6 s at
1,000 participants of 100 shared limits (4.7 MB, 47,000 lines), and with ``deploy/prometheus.yml`` scraping every
5 s the reports' p99 went from 36 ms to 723 ms. Here the collector pauses every ``STEP_ENTRIES`` entries
(``ThrottlescopeCollector.collect_steps``), each family is rendered ``SAMPLES_PER_PIECE`` samples at a time
(``metrics.exposition.pieces``: joined, the client library's own text, byte for byte), and between pieces the loop
answers what came. The same scrape then read a p99 of 25 ms.

A scrape's CPU grows with participants x limits: 0.7 s at 1,000 x 100, about 2 s at 3,000 x 100 -- every 5 s, 40 %
of the core that answers reports, and that cell, able to settle at a report every 10 s before, never settled. So
rendering is held to ``SCRAPE_SHARE`` (0.1) of a core: a costly render is handed out again until rendering anew
keeps to it (1,000 x 100: a fresh render every 7 s at most instead of 5; 3,000 x 100 every 21 s). Prometheus then
reads the same samples twice, which its ``rate()`` takes in its stride (counters never go backwards: an older
render is an earlier state). The last render's CPU is on ``/healthz`` (``scrapeCpuSeconds``).

Not thread-safe: the scrapes are answered on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from controlplane.renders import Answer, Pieces, Rendered, Renders
from metrics.collector import ThrottlescopeCollector
from metrics.exposition import pieces

__all__ = ["Scrapes", "SCRAPE_SHARE", "rendered_pieces"]

SCRAPE_SHARE = 0.1   # of a core: what rendering scrapes may take, on average
_SCRAPE = "metrics"  # the one key scrapes are kept under


def rendered_pieces(collector: ThrottlescopeCollector) -> Pieces:
    """The scrape's text in pieces, with ``None`` where the collector pauses."""
    for family in collector.collect_steps():
        if family is None:
            yield None
        else:
            yield from pieces(family)


class Scrapes(Renders):
    """The scrapes of one collector, held to ``share`` of a core (see ``controlplane.renders``)."""

    def __init__(self, collector: ThrottlescopeCollector, *, share: float = SCRAPE_SHARE,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        super().__init__(share=share, clock=clock, cpu_clock=cpu_clock)
        self._collector = collector
        self._forgotten_cpu_s: float | None = None   # the CPU of the last render, once its text was dropped

    @property
    def latest(self) -> Rendered | None:
        """The last scrape's render, while it is kept (None before the first, and once nobody scraped for a
        minute: its text is dropped)."""
        return self.last(_SCRAPE)

    @property
    def latest_cpu_s(self) -> float | None:
        """The CPU the last scrape's render took (None before the first), kept after its text is dropped: a
        scraper that stopped for a minute is no reason for ``/healthz`` to forget what a scrape costs."""
        kept = self.last(_SCRAPE)
        return kept.cpu_s if kept is not None else self._forgotten_cpu_s

    def _forget(self, now: float) -> None:
        kept = self.last(_SCRAPE)
        super()._forget(now)
        if kept is not None and self.last(_SCRAPE) is None:
            self._forgotten_cpu_s = kept.cpu_s

    async def text(self) -> Answer:
        """One scrape's text, in pieces, letting the loop answer others between them."""
        return await self.answer(_SCRAPE, lambda: rendered_pieces(self._collector))
