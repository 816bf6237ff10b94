"""ExactCounter: a total that many threads add to without a lock and without losing an addition.

``add(1)`` takes a number from ``units``, an ``itertools.count`` (each number is handed out once, in C); any
other amount goes to ``append``, a ``collections.deque``'s atomic append. ``settle()`` folds both into the total
under a lock: it takes a number itself, so every number below it was an ``add(1)`` that happened before.
Both channels are atomic in every CPython build, free-threaded included, so the GIL is not what keeps the
total exact. ``AsyncTokenBucket`` records its hot-path consumption through one of these (using ``units`` and
``append`` directly, to save a call), and limiters count what an unlimited dimension admitted with another.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from itertools import islice

__all__ = ["ExactCounter"]

_NEVER = object()  # a sentinel no deque item can equal: lets iter(popleft, _NEVER) drain in C


class ExactCounter:
    __slots__ = ("units", "append", "_pending", "_units_base", "_total", "_lock")

    def __init__(self) -> None:
        self.units = itertools.count()
        self._pending: deque = deque()
        self.append = self._pending.append
        self._units_base = 0
        self._total = 0
        self._lock = threading.Lock()

    def add(self, n: float = 1) -> None:
        if n == 1:
            next(self.units)
        elif n:
            self.append(n)

    def settle(self) -> tuple[float, int]:
        """(the exact total, the unit number this call took); later ``add(1)`` calls take higher numbers."""
        with self._lock:
            position = next(self.units)
            self._total += position - self._units_base
            self._units_base = position + 1
            size = len(self._pending)
            if size:
                self._total += sum(islice(iter(self._pending.popleft, _NEVER), size))
            return self._total, position

    def value(self) -> float:
        return self.settle()[0]
