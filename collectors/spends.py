"""What each pool spent, and when: read from its balance at every look of the grant keeper.

A pool (``collectors.grants``) is filled only by the keeper's deposits, so whatever left it between two looks
was spent: ``expected - balance``, where ``expected`` is the balance of the last look plus what the keeper
deposited since (a give-back deposits a negative amount). A spend seen at a look is dated at that look -- at or
after the moment it happened, so the control plane, which counts a spend from its date on, counts it for at least
as long as it should (``limiter.grants``: counted when spent, not when granted).

The spends seen since a pool's last ask go with its next ask (``GrantAsk.spent``), with what the pool holds then
(``held``); they are dropped only once an ask carrying them was answered. More than ``MAX_SPENDS`` are merged, the
oldest two into the later date (counted longer, never less).
"""

from __future__ import annotations

from collections.abc import Iterable

from protocol import MAX_SPENDS, Spend

__all__ = ["SpendLog"]

DUST = 1e-9


class _Pool:
    __slots__ = ("expected", "seen", "sent")

    def __init__(self, balance: tuple[float | None, float | None]):
        self.expected = balance
        self.seen: list[list[float]] = []   # [at_s, msgs, bytes], oldest first, not yet answered
        self.sent = 0                       # how many of ``seen`` the ask in flight carries


class SpendLog:
    """Spends per pool key since its last answered ask (see the module essay). The keeper's own: not
    thread-safe."""

    def __init__(self, max_spends: int = MAX_SPENDS):
        if max_spends < 2:
            raise ValueError(f"max_spends must be >= 2, got {max_spends!r}")
        self.max_spends = max_spends
        self._pools: dict[str, _Pool] = {}

    def look(self, key: str, balance: tuple[float | None, float | None], now_s: float) -> None:
        """The pool ``key`` holds ``balance`` (msgs, bytes; None: unlimited) at ``now_s``."""
        pool = self._pools.get(key)
        if pool is None:
            self._pools[key] = _Pool(balance)
            return
        spent = [0.0, 0.0]
        for i, (was, now) in enumerate(zip(pool.expected, balance, strict=True)):
            if was is not None and now is not None and was - now > DUST:
                spent[i] = was - now
        pool.expected = balance
        if spent[0] or spent[1]:
            pool.seen.append([now_s, spent[0], spent[1]])
            if len(pool.seen) > self.max_spends:
                oldest = pool.seen.pop(0)
                pool.seen[0][1] += oldest[1]
                pool.seen[0][2] += oldest[2]
                pool.sent = max(0, pool.sent - 1)

    def deposited(self, key: str, msgs: float, bytes_: float) -> None:
        """The keeper deposited (msgs, bytes) into pool ``key`` (negative: took them back)."""
        pool = self._pools.get(key)
        if pool is not None:
            m, b = pool.expected
            pool.expected = (None if m is None else m + msgs, None if b is None else b + bytes_)

    def unsent(self, key: str, now_s: float) -> list[Spend]:
        """The spends of ``key`` not yet answered, for an ask sent at ``now_s`` (marked as carried by it)."""
        pool = self._pools.get(key)
        if pool is None:
            return []
        pool.sent = len(pool.seen)
        return [Spend(ago_s=max(0.0, now_s - at), msgs=m, bytes=b) for at, m, b in pool.seen]

    def answered(self, key: str) -> None:
        """The ask carrying ``key``'s spends was answered: they are the control plane's now."""
        pool = self._pools.get(key)
        if pool is not None:
            del pool.seen[:pool.sent]
            pool.sent = 0

    def forget(self, keep: Iterable[str]) -> None:
        keep = set(keep)
        for key in [k for k in self._pools if k not in keep]:
            del self._pools[key]
