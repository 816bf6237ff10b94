"""One row of machine numbers per shared limit: what a participant keeps to take its shares, packed.

Why
---
A participant keeps, per shared limit it holds a pool of, a few numbers: the last grant's chunk and safe rate and
when to ask again (``collectors.grants.Grants``), the pool's admitted counter, when it last moved and how fast it
spends (``GrantKeeper``), and the balance it should hold (``collectors.spends.SpendLog``). Kept in nine dicts keyed
by the limit's key, with a tuple or a float object in each entry, that was 660 B a limit: 3.3 MB for PIP-82's
sizing case of 5,000 shared limits on one participant. Here each field is a column: an ``array`` of machine
numbers, 8 B for a time, a counter or a balance (``'d'``) and 4 B for a rate or a chunk (``'f'``: float32's 7
digits are more than a share needs), indexed by the limit's row. The keys are found by bisection in a sorted list,
beside an array of their rows: 12 B a key, where a dict entry and the int object of its row take 49 B. A limit
costs its key, 12 B and its row's 86 B -- 170 B with the keys of ``benchmarks.bench_scale`` (72 B for a
``'topic:publish:g0/ns0/t0'``). A lookup is a bisection (13 string comparisons in C at 5,000 keys, under 1 us); a
new key shifts the two index lists, not the columns: rows never move.

The users share one ``ShareRows`` (one key, one row) and each owns its columns: ``column(typecode, default)``
gives an array indexed by row. ``add(key)`` returns the key's row, making it if new: a new row, or one freed by
``forget``, with every column set back to its default. State that few limits have (a sink's pause, spends not yet
answered) stays in small dicts of its owner, not in a column every limit pays for.

Consistency
-----------
The index (the sorted keys and their rows) changes under a lock, and is read under it: rows are added and
forgotten by the grant keeper's round, one at a time, and read from other threads too (a producer's limiter
asking ``Grants.mode``, the reporter reading the fair rates) with ``read``, which finds the row and reads its
numbers under the lock -- a row freed by ``forget`` is reused by the next new key, and must not be read as the
old key's. The keeper, the only writer, reads its own columns directly, and writes an answer's numbers one at a
time: a read may see, for an instant, fields of two successive answers -- each a value the control plane said.
"""

from __future__ import annotations

import math
import threading
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator

__all__ = ["ShareRows", "NONE"]

NONE = math.nan   # a column's "no value" (an unlimited dimension, a limit never answered)


class ShareRows:
    """Rows of numbers by limit key (see the module essay)."""

    def __init__(self) -> None:
        self._keys: list[str] = []        # sorted
        self._rows = array("I")           # the row of each of ``_keys``
        self._free: list[int] = []
        self._size = 0
        self._columns: list[tuple[array, float]] = []
        self._lock = threading.Lock()

    def column(self, typecode: str, default: float) -> array:
        """A new column of ``typecode`` (``'d'``, ``'f'`` or ``'B'``), every row at ``default``."""
        if typecode not in ("d", "f", "B"):
            raise ValueError(f"typecode must be 'd', 'f' or 'B', got {typecode!r}")
        with self._lock:
            col = array(typecode, [default]) * self._size
            self._columns.append((col, default))
        return col

    def _find(self, key: str) -> tuple[int, bool]:
        """(where ``key`` is or would go in ``_keys``, whether it is there), under the lock."""
        i = bisect_left(self._keys, key)
        return i, i < len(self._keys) and self._keys[i] == key

    def get(self, key: str) -> int | None:
        with self._lock:
            i, found = self._find(key)
            return self._rows[i] if found else None

    def read(self, key: str, *columns: array) -> tuple[float, ...] | None:
        """``key``'s numbers in ``columns``, None if it has no row: found and read under the lock (another thread
        never reads a row that was forgotten and given to another key in between)."""
        with self._lock:
            i, found = self._find(key)
            return tuple(col[self._rows[i]] for col in columns) if found else None

    def add(self, key: str) -> int:
        """``key``'s row, made (every column at its default) if it has none."""
        with self._lock:
            i, found = self._find(key)
            if found:
                return self._rows[i]
            if self._free:
                row = self._free.pop()
                for col, default in self._columns:
                    col[row] = default
            else:
                row = self._size
                self._size += 1
                for col, default in self._columns:
                    col.append(default)
            self._keys.insert(i, key)
            self._rows.insert(i, row)
            return row

    def forget(self, keep: Iterable[str]) -> list[str]:
        """Free the rows of every key not in ``keep``; returns those keys."""
        keep = keep if isinstance(keep, (set, frozenset, dict)) else set(keep)
        with self._lock:
            gone = [k for k in self._keys if k not in keep]
            if gone:
                pairs = list(zip(self._keys, self._rows, strict=True))
                self._free.extend(row for k, row in pairs if k not in keep)
                self._keys = [k for k, _ in pairs if k in keep]
                self._rows = array("I", (row for k, row in pairs if k in keep))
            return gone

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._keys))
