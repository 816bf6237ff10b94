"""The Prometheus text format of one metric family, in pieces: what a scrape sends while the event loop goes on.

Why
---
``prometheus_client.generate_latest`` renders a registry in one call. Where the control plane serves ``/metrics``
that call ran on a worker thread beside the event loop that answers reports, and took the process's one core for the
length of the scrape: 1.2-1.6 s at 1,000 participants of 100 shared limits (4.7 MB, 47,000 lines). Python threads
share the interpreter lock, and the loop, which gives it up at every socket call, waited for it back each time: a
report that came during a scrape was answered up to 0.8 s late, and with ``deploy/prometheus.yml`` scraping every
5 s the reports' p99 went from 36 ms to 723 ms. So the scrape runs on the loop itself, a piece at a time:
``ThrottlescopeCollector.collect_steps`` pauses every ``STEP_ENTRIES`` entries, and ``pieces`` renders a family
``SAMPLES_PER_PIECE`` samples at a time, each piece ``generate_latest``'s own text, so that joined they are exactly
what it renders for the whole family (the tests compare them byte for byte).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric

__all__ = ["pieces", "SAMPLES_PER_PIECE"]

SAMPLES_PER_PIECE = 500   # 5-7 ms of rendering (about 13 us a sample)
# samples generate_latest moves to a family of their own after the others: such a family is rendered whole
_MOVED_SUFFIXES = ("_created", "_gsum", "_gcount")


class _One:
    """A collector of one family (what ``generate_latest`` reads)."""

    def __init__(self, family: Metric) -> None:
        self._family = family

    def collect(self) -> list[Metric]:
        return [self._family]


def pieces(family: Metric, per_piece: int = SAMPLES_PER_PIECE) -> Iterator[bytes]:
    """``generate_latest``'s text for ``family``, ``per_piece`` samples a piece; joined, the same bytes."""
    samples = family.samples
    if len(samples) <= per_piece or any(s.name[len(family.name):] in _MOVED_SUFFIXES for s in samples):
        yield generate_latest(_One(family))
        return
    for start in range(0, len(samples), per_piece):
        part = copy.copy(family)
        part.samples = samples[start:start + per_piece]
        text = generate_latest(_One(part))
        # the # HELP and # TYPE lines come once, with the first piece
        yield text if start == 0 else text.split(b"\n", 2)[2]
