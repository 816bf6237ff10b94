"""Applying the control plane's answers: policies -> every local limiter's limit; shared limits -> token pools.

How it works and why
--------------------
A participant holds limiters by (level, name) for publish (``limiter.PublishLimits``) and dispatch
(``collectors.dispatching.DispatchLimits``). For each one, ``PolicyView.limit(level, direction, name)``
(``protocol.rules``: the same reading the control plane makes) says what the policies configure there and
whether it is *shared* (spans participants). A limiter's local rate is then:

- not shared (the broker level), or unlimited: the configured rate itself;
- shared and limited: a *pool* (``collectors.grants``): buckets that refill by nothing but the chunks of tokens
  the control plane grants (at most the limit per period), kept filled by the grant keeper; or, once the
  control plane has been unreachable for a moment, the safe rate it last answered (a static split).

Rates change only when they move (an operator's change of 1 msg/s is applied).

Newly created limiters start at ``target(level, direction, name)`` (the ``initial_rate`` hook of both
registries), so a producer created between two answers is limited from its first send. The hook reads only
immutable snapshots (``_view`` is replaced, never mutated), so it takes no lock.

Everything else the policies carry is per participant: offload flow permits
(``managedLedgerOffloadBrokerFlowPermitsPerSecond`` -> ``OffloadThrottle.bytes_per_s``), mutation quotas per
(user, client-id) (-> ``MutationQuotaRegistry.apply``; -1 = an explicitly unlimited entry, kept as
``UNLIMITED_MUTATIONS_PER_S`` so it still overrides a ``<default>``), and the dispatcher flags.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from limiter.dispatch import DispatchRateLimiter
from limiter.levels import PublishLimits
from limiter.mutation import MutationQuotaRegistry
from limiter.offload import OffloadThrottle
from limiter.policy import Level, Rate
from limiter.publish import PublishRateLimiter
from protocol import (
    DISPATCH,
    PUBLISH,
    SHARED_LEVELS,
    UNLIMITED_MUTATIONS_PER_S,
    Limit,
    PolicySet,
    PolicyView,
    limit_key,
)

from .dispatching import DispatchLimits
from .grants import SAFE_BURST_S, Grants

__all__ = ["PolicyView", "Limit", "Applier", "PUBLISH", "DISPATCH", "SHARED_LEVELS", "UNLIMITED_MUTATIONS_PER_S"]

log = logging.getLogger(__name__)



def _moved(old: Rate, new: Rate, tolerance: float) -> bool:
    if old.period_s != new.period_s:
        return True
    for a, b in ((old.msgs, new.msgs), (old.bytes, new.bytes)):
        if (a > 0) != (b > 0):
            return True
        if a > 0 and abs(b - a) > tolerance * a:
            return True
    return False


class Applier:
    """Keeps every local limiter at its target from the latest policies and grants (see the essay)."""

    def __init__(self, participant_id: str, limits: PublishLimits, dispatch: DispatchLimits,
                 offload: OffloadThrottle | None = None, mutations: MutationQuotaRegistry | None = None,
                 now_s: Callable[[], float] | None = None):
        self.me = participant_id
        self.limits, self.dispatch, self.offload, self.mutations = limits, dispatch, offload, mutations
        self._now_s = now_s or (lambda: limits.clock.now_ns() / 1e9)
        self.grants = Grants(self._now_s)
        self._view: PolicyView | None = None
        self._attached: dict[tuple[Level, str], str] = {}
        self._lock = threading.Lock()
        self.created_at: dict[str, float] = {}  # limit key -> when its limiter was created (for the first rate)
        limits.initial_rate = self._initial_publish_rate
        dispatch.initial_rate = self._initial_dispatch_rate

    # --- reads (lock-free: immutable snapshots) -----------------------------------------------------------

    @property
    def view(self) -> PolicyView | None:
        return self._view

    @property
    def version(self) -> int:
        return self._view.version if self._view is not None else 0

    def limit(self, level: Level, direction: str, name: str) -> Limit | None:
        view = self._view
        return None if view is None else view.limit(level, direction, name)

    def target(self, level: Level, direction: str, name: str) -> Rate | None:
        """The rate the local limiter of (level, direction, name) should have now; None: no policies yet."""
        found = self._target(level, direction, name)
        return None if found is None else found[0]

    def _target(self, level: Level, direction: str, name: str) -> tuple[Rate, bool, tuple | None] | None:
        """(rate, shared and limited?, pool capacity or None)."""
        limit = self.limit(level, direction, name)
        if limit is None:
            return None
        if not limit.shared or limit.rate.is_unlimited:
            return limit.rate, False, None
        rate, pool = self.grants.mode(limit_key(Level(level).value, direction, name), limit.rate)
        return rate, True, pool

    def pooled(self, level: Level, direction: str, name: str) -> Rate | None:
        """The configured limit of (level, direction, name) if it is shared and limited (a pool), else None."""
        limit = self.limit(level, direction, name)
        if limit is None or not limit.shared or limit.rate.is_unlimited:
            return None
        return limit.rate

    def reports(self, level: Level, direction: str, name: str) -> bool:
        """Whether this participant sends usage for (level, direction, name): a shared limit that is limited
        (every resource group, limited or not, so the dashboard shows who uses it)."""
        limit = self.limit(level, direction, name)
        if limit is None or not limit.shared:
            return False
        return Level(level) is Level.RESOURCE_GROUP or not limit.rate.is_unlimited

    def resource_group_of(self, topic: str) -> str | None:
        view = self._view
        return None if view is None else view.resource_group_of(topic)

    def _initial_publish_rate(self, level: Level, name: str) -> Rate | None:
        self.created_at[limit_key(Level(level).value, PUBLISH, name)] = self._now_s()
        return self.target(level, PUBLISH, name)

    def _initial_dispatch_rate(self, level: Level, name: str) -> Rate | None:
        self.created_at[limit_key(Level(level).value, DISPATCH, name)] = self._now_s()
        return self.target(level, DISPATCH, name)

    # --- applying -----------------------------------------------------------------------------------------

    def apply(self, policies: PolicySet | None = None) -> None:
        """Apply new policies (if given), then bring every local limiter to its target."""
        with self._lock:
            if policies is not None:
                self._apply_policies(PolicyView(policies))
            self._refresh()

    def refresh(self) -> None:
        with self._lock:
            self._refresh()

    def _apply_policies(self, view: PolicyView) -> None:
        self._view = view
        wanted = view.attachments()
        for (level, target), group in wanted.items():
            if self._attached.get((level, target)) != group:
                self.limits.attach_resource_group(level, target, group)
        for (level, target) in [k for k in self._attached if k not in wanted]:
            self.limits.attach_resource_group(level, target, None)
        self._attached = wanted
        self.dispatch.configure(**view.dispatch_options())
        if self.offload is not None:
            self.offload.bytes_per_s = view.offload_bytes_per_s()
        if self.mutations is not None:
            self.mutations.apply(view.mutation_configs())

    def _refresh(self) -> None:
        if self._view is None:
            return
        for lim in self.limits.limiters():
            self._set(lim, PUBLISH)
        for lim in self.dispatch.limiters():
            self._set(lim, DISPATCH)

    def _set(self, lim: PublishRateLimiter | DispatchRateLimiter, direction: str) -> None:
        found = self._target(lim.level, direction, lim.name)
        if found is None:
            return
        rate, shared, pool = found
        moved = _moved(lim.rate, rate, 0.0)
        if isinstance(lim, PublishRateLimiter):
            fallback = shared and pool is None   # the safe split: this worker's static part of the limit
            burst = SAFE_BURST_S if fallback else None
            # (a shared limit's part holds: a pool by being one, the split by ``hold_when_dry``; compared as such,
            # else every refresh re-applied every pool and re-planned, past its deposit, a waiting producer's release)
            if moved or lim.burst_s != burst or lim.capacity != pool or lim.holds_when_dry != shared:
                # (a task's new producer waits out the split's debt, as a pool's does: else each task of a worker
                # adds one acquire to the limit's window -- 1.2x the limit in a 1-s window through an outage)
                lim.update_rate(rate, burst, pool, hold_when_dry=fallback)
        elif pool is not None:
            if moved or lim.capacity != pool:
                lim.pool(rate, pool)
        elif moved or lim.capacity is not None:
            lim.rate = rate
