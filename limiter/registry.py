"""limiter_for: one limiter per (level, name), made on first use -- the lookup every per-process registry shares.

How it works and why
--------------------
A process holds one limiter per (level, name): publish limiters in ``PublishLimits``, dispatch limiters in the
participant runtime's ``DispatchLimits``. Each is made the first time something asks for it, and both registries
must decide a new limiter's rate the same way: what their ``initial_rate(level, name)`` hook answers (the
runtime's last known local share, so a limiter made between two control-plane answers does not start unlimited),
else the registry's own default. Both make it under their lock, so that two threads asking at once get the same
limiter. The hook is passed at each call rather than kept here: the runtime sets it after the registry exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from .policy import Level, Rate

__all__ = ["limiter_for", "forget_unbound", "InitialRate"]

L = TypeVar("L")
InitialRate = Callable[[Level, str], Rate | None]


def limiter_for(limiters: dict[tuple[Level, str], L], lock: AbstractContextManager[Any], level: Level, name: str,
                initial_rate: InitialRate | None, make: Callable[[Level, str, Rate | None], L]) -> L:
    """The limiter of (``level``, ``name``) in ``limiters``. On first use, under ``lock``, ``make(level, name,
    rate)`` makes it, ``rate`` being ``initial_rate(level, name)``: None when there is no hook or it has no
    answer, and then ``make`` applies the registry's default."""
    level = Level(level)
    key = (level, name)
    with lock:
        limiter = limiters.get(key)
        if limiter is None:
            rate = initial_rate(level, name) if initial_rate is not None else None
            limiter = limiters[key] = make(level, name, rate)
        return limiter


def forget_unbound(limiters: dict[tuple[Level, str], L], lock: AbstractContextManager[Any],
                   keys: Iterable[tuple[Level, str]], bound_ids: Callable[[], set[int]]) -> list[L]:
    """Remove from ``limiters`` those of ``keys`` that no live producer or dispatcher is bound to (``bound_ids()``,
    read under ``lock``: the ``id`` of every limiter one is bound to), and return them. The lock must be the one
    under which the registry binds new producers or dispatchers to its limiters."""
    with lock:
        bound = bound_ids()
        gone = [key for key in keys if key in limiters and id(limiters[key]) not in bound]
        return [limiters.pop(key) for key in gone]
