"""What each pool spent, and when: read from its balance at every look of the grant keeper.

A pool (``collectors.grants``) is filled only by the keeper's deposits, so whatever left it between two looks
was spent: ``expected - balance``, where ``expected`` is the balance of the last look plus what the keeper
deposited since (a give-back deposits a negative amount). A spend must be dated at or after the moment it happened,
so that the control plane, which counts a spend from its date on, counts it for at least as long as it should
(``limiter.grants``: counted when spent, not when granted). Dated at the look that saw it, it is counted up to a
keeper's beat (20 ms) too long: a micro-batch's lump of sends held the next worker back until that much after the
lump slid out of the window, every second. So a look is told when the pool's producers last sent (``charged_s``:
the clock's tick their newest recorded send read, free on the hot path, ``AsyncTokenBucket.charged_ns``), and the
spend it sees is dated ``charged_s + lag_s`` (the most a tick lags the clock, ``limiter.clock.TICK_LAG_S``) when
that is after the previous look and before this one; else at this look (the newest send recorded is older than
the previous look: this spend came by a path that records none, a ``consume(1)`` within its allowance).

Worked example (``lag_s`` 7 ms): looks at 1.000 s and 1.020 s; a lump of 125 sent at 1.001-1.004 s (the tick read
1.003 s at the last). The look at 1.020 s sees 125 spent and dates it 1.010 s: counted until 2.010 s, not 2.020 s.

Consistency: the date is at or after every spend it covers, but for what the rule cannot see -- one token's
``consume(1)`` within an allowance after the newest recorded send, and a tick that lagged by more than ``lag_s``
(a ticker kept from the GIL for more than one switch interval): both a few milliseconds of a token or a send,
within the bound's slack (``limiter.spent``).

The spends seen since a pool's last ask go with its next ask (``GrantAsk.spent``), with what the pool holds then
(``held``); they are dropped only once an ask carrying them was answered. More than ``MAX_SPENDS`` are merged, the
oldest two into the later date (counted longer, never less).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from limiter.clock import TICK_LAG_S
from protocol import MAX_SPENDS, Spend

from .share_rows import NONE, ShareRows

__all__ = ["SpendLog"]

DUST = 1e-9


class _Seen:
    """A pool's spends not yet answered (only pools that spent since their last answered ask have one)."""

    __slots__ = ("spends", "sent")

    def __init__(self) -> None:
        self.spends: list[list[float]] = []   # [at_s, msgs, bytes], oldest first
        self.sent = 0                         # how many of them the ask in flight carries


class SpendLog:
    """Spends per pool key since its last answered ask (see the module essay). The keeper's own: not
    thread-safe. ``rows``: the participant's share rows (``collectors.share_rows``), which it shares with the
    grant keeper; its own if not given."""

    def __init__(self, max_spends: int = MAX_SPENDS, rows: ShareRows | None = None, lag_s: float = TICK_LAG_S):
        if max_spends < 2:
            raise ValueError(f"max_spends must be >= 2, got {max_spends!r}")
        if not (isinstance(lag_s, int | float) and 0 <= lag_s < math.inf):
            raise ValueError(f"lag_s must be a number of seconds >= 0, got {lag_s!r}")
        self.max_spends = max_spends
        self.lag_s = float(lag_s)
        self.rows = ShareRows() if rows is None else rows
        # the balance each pool should hold now but for spends (NONE: that dimension is unlimited)
        self._expected = (self.rows.column("d", NONE), self.rows.column("d", NONE))
        self._looked_at = self.rows.column("d", -math.inf)   # (-inf: never looked at)
        self._seen: dict[str, _Seen] = {}

    def look(self, key: str, balance: tuple[float | None, float | None], now_s: float,
             charged_s: float | None = None) -> int:
        """The pool ``key`` holds ``balance`` (msgs, bytes; None: unlimited) at ``now_s``; its producers' newest
        recorded send read the tick ``charged_s`` (None: unknown). Returns its row in ``rows`` (made if it had
        none)."""
        row = self.rows.add(key)
        before_s, self._looked_at[row] = self._looked_at[row], now_s
        if before_s == -math.inf:
            self._set_expected(row, balance)
            return row
        spent = [0.0, 0.0]
        for i, now in enumerate(balance):
            was = self._expected[i][row]
            if now is not None and not math.isnan(was) and was - now > DUST:
                spent[i] = was - now
        self._set_expected(row, balance)
        if spent[0] or spent[1]:
            at_s = now_s
            if charged_s is not None and before_s < charged_s + self.lag_s < now_s:
                at_s = charged_s + self.lag_s   # (see the module essay)
            seen = self._seen.get(key)
            if seen is None:
                seen = self._seen[key] = _Seen()
            seen.spends.append([at_s, spent[0], spent[1]])
            if len(seen.spends) > self.max_spends:
                oldest = seen.spends.pop(0)
                seen.spends[0][1] += oldest[1]
                seen.spends[0][2] += oldest[2]
                seen.sent = max(0, seen.sent - 1)
        return row

    def _set_expected(self, row: int, balance: tuple[float | None, float | None]) -> None:
        for i, b in enumerate(balance):
            self._expected[i][row] = NONE if b is None else b

    def deposited(self, key: str, msgs: float, bytes_: float) -> None:
        """The keeper deposited (msgs, bytes) into pool ``key`` (negative: took them back)."""
        row = self.rows.get(key)
        if row is not None and self._looked_at[row] != -math.inf:
            self._expected[0][row] += msgs    # (NaN, an unlimited dimension, stays NaN)
            self._expected[1][row] += bytes_

    def oldest_unsent_s(self, key: str) -> float | None:
        """The date of the oldest spend of ``key`` not yet carried by an ask (None: it has none)."""
        seen = self._seen.get(key)
        return seen.spends[seen.sent][0] if seen is not None and seen.sent < len(seen.spends) else None

    def unsent(self, key: str, now_s: float) -> list[Spend]:
        """The spends of ``key`` not yet answered, for an ask sent at ``now_s`` (marked as carried by it)."""
        seen = self._seen.get(key)
        if seen is None:
            return []
        seen.sent = len(seen.spends)
        return [Spend(ago_s=max(0.0, now_s - at), msgs=m, bytes=b) for at, m, b in seen.spends]

    def answered(self, key: str) -> None:
        """The ask carrying ``key``'s spends was answered: they are the control plane's now."""
        seen = self._seen.get(key)
        if seen is not None:
            del seen.spends[:seen.sent]
            seen.sent = 0
            if not seen.spends:
                del self._seen[key]
                if not self._seen:
                    self._seen = {}   # (a dict keeps its table when emptied: 100 kB after 5,000 pools spent)

    def forget(self, keep: Iterable[str]) -> None:
        keep = set(keep)
        self.rows.forget(keep)
        for key in [k for k in self._seen if k not in keep]:
            del self._seen[key]
