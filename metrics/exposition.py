"""The Prometheus text format of one metric family, in pieces: what lets a scrape be rendered a little at a time.

``prometheus_client.generate_latest`` renders a registry in one call; the control plane renders a scrape on its event
loop between reports instead (``controlplane.scrapes`` says why). ``pieces`` renders a family ``SAMPLES_PER_PIECE``
samples at a time, each piece ``generate_latest``'s own text for those samples, the ``# HELP`` and ``# TYPE`` lines
with the first piece only: joined, the pieces are exactly what it renders for the whole family (the tests compare
them byte for byte). A family with samples it moves after the others (``_created``, ``_gsum``, ``_gcount``) is
rendered whole.
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
