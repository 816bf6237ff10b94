"""The dispatch limiters of one participant, by (level, name), and dispatchers wired to them.

``limiter.dispatch`` gives the algorithm (``DispatchRateLimiter`` per level, ``Dispatcher`` per subscription);
this module is the per-process registry the participant runtime needs around it:

- ``DispatchLimits.limiter(level, name)`` -- one ``DispatchRateLimiter`` per (level, name), created on first use
  at the rate ``initial_rate(level, name)`` gives (the runtime's last known local share), else unlimited;
- ``DispatchLimits.dispatcher(topic, subscription, group=...)`` -- a ``Dispatcher`` over the broker, topic,
  subscription and resource-group limiters that apply, which also counts what it charges per level
  (``DispatchRateLimiter`` keeps balances, not totals, and the shared quota needs usage: Δadmitted / Δt);
- ``measure(level, name)`` -- (admitted msgs, admitted bytes, reads sent into backoff, dispatchers bound).

Names: topic ``t/ns/topic``, subscription ``t/ns/topic/subscription``, broker ``broker``, resource group as named.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from limiter.clock import Clock, SystemClock
from limiter.counter import ExactCounter
from limiter.dispatch import Dispatcher, DispatchRateLimiter
from limiter.levels import split_topic
from limiter.policy import Level, Rate
from limiter.registry import forget_unbound, limiter_for

__all__ = ["DispatchLimits", "CountingDispatcher", "BROKER_NAME"]

BROKER_NAME = "broker"


class CountingDispatcher(Dispatcher):
    """A ``Dispatcher`` that also adds what it charges to per-level totals (usage for the shared quota)."""

    def __init__(self, counters: list[tuple[ExactCounter, ExactCounter]], **kwargs: Any):
        super().__init__(**kwargs)
        self._counters = counters  # aligned with self.levels

    def charge(self, msgs: int, bytes_: int, entries: int, plan=None, has_backlog: bool = True) -> None:
        super().charge(msgs, bytes_, entries, plan, has_backlog)
        exempt = not plan.throttled if plan is not None else not (has_backlog or self.throttle_non_backlog)
        if exempt:
            return
        permits = entries if self.count_entries else msgs
        for msgs_total, bytes_total in self._counters:
            msgs_total.add(permits)
            bytes_total.add(bytes_)


class DispatchLimits:
    """Every dispatch limiter of one process, by level and name (see the module doc). Thread-safe."""

    def __init__(self, clock: Clock | None = None,
                 initial_rate: Callable[[Level, str], Rate | None] | None = None):
        self._clock = clock or SystemClock()
        self.initial_rate = initial_rate
        self._lock = threading.RLock()   # (held across a new dispatcher's limiters and its binding: ``forget``)
        self._limiters: dict[tuple[Level, str], DispatchRateLimiter] = {}
        self._counters: dict[tuple[Level, str], tuple[ExactCounter, ExactCounter]] = {}
        self._dispatchers: weakref.WeakSet[CountingDispatcher] = weakref.WeakSet()
        self.options: dict[str, Any] = {}  # Dispatcher flags from the broker settings (runtime-applied)

    def limiter(self, level: Level, name: str = BROKER_NAME) -> DispatchRateLimiter:
        return limiter_for(self._limiters, self._lock, level, name, self.initial_rate, self._new_limiter)

    def _new_limiter(self, level: Level, name: str, rate: Rate | None) -> DispatchRateLimiter:
        limiter = DispatchRateLimiter(rate or Rate.unlimited(), level, name, self._clock)
        # Made under the registry's lock with the limiter, so every limiter has its usage totals.
        self._counters[(level, name)] = (ExactCounter(), ExactCounter())
        return limiter

    def dispatcher(self, topic: str, subscription: str | None = None, group: str | None = None,
                   **options: Any) -> CountingDispatcher:
        """A dispatcher for ``subscription`` on ``topic`` (``t/ns/topic``), under broker, topic, subscription
        (when given) and resource group ``group`` (when given). ``options`` override the broker settings."""
        _, _, topic = split_topic(topic)
        with self._lock:   # (a limiter forgotten between its lookup and the binding would be refilled by no one)
            levels = {"broker": self.limiter(Level.BROKER, BROKER_NAME), "topic": self.limiter(Level.TOPIC, topic)}
            if subscription:
                levels["subscription"] = self.limiter(Level.SUBSCRIPTION, f"{topic}/{subscription}")
            if group:
                levels["resource_group"] = self.limiter(Level.RESOURCE_GROUP, group)
            order = [levels[k] for k in ("broker", "topic", "subscription", "resource_group") if k in levels]
            counters = [self._counters[(lim.level, lim.name)] for lim in order]
            dispatcher = CountingDispatcher(counters, **levels, **{**self.options, **options})
            self._dispatchers.add(dispatcher)
        return dispatcher

    def forget(self, keys: list[tuple[Level, str]]) -> list[tuple[Level, str]]:
        """Drop the limiters of ``keys`` (and their usage totals) that no live dispatcher is bound to, and return
        their keys: ``PublishLimits.forget``'s rule."""
        def bound_ids() -> set[int]:
            return {id(limiter) for dispatcher in self._dispatchers for limiter in dispatcher.levels}
        with self._lock:
            gone = [(lim.level, lim.name) for lim in forget_unbound(self._limiters, self._lock, keys, bound_ids)]
            for key in gone:
                self._counters.pop(key, None)
        return gone

    def configure(self, **options: Any) -> None:
        """New defaults for dispatchers (broker settings), applied to the live ones too."""
        attrs = {"precise_dispatcher_flow_control": "precise", "dispatch_throttling_on_batch_message": "count_entries",
                 "dispatch_throttling_on_non_backlog_consumer": "throttle_non_backlog"}
        with self._lock:
            self.options.update(options)
            dispatchers = list(self._dispatchers)
        for d in dispatchers:
            for option, value in options.items():
                if option in attrs:
                    setattr(d, attrs[option], value)

    def limiters(self) -> list[DispatchRateLimiter]:
        with self._lock:
            return list(self._limiters.values())

    def dispatcher_counts(self) -> dict[tuple[Level, str], int]:
        with self._lock:
            dispatchers = list(self._dispatchers)
        counts: dict[tuple[Level, str], int] = {}
        for d in dispatchers:
            for lim in d.levels:
                counts[(lim.level, lim.name)] = counts.get((lim.level, lim.name), 0) + 1
        return counts

    def admitted(self, level: Level, name: str) -> tuple[float, float]:
        """(msgs, bytes) charged at this level so far (entries instead of msgs with batch counting)."""
        with self._lock:
            counters = self._counters.get((Level(level), name))
        if counters is None:
            return 0.0, 0.0
        return counters[0].value(), counters[1].value()
