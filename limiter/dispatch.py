"""Dispatch throttling: how many entries a subscription may read next, under every level's dispatch rate.

How it works and why
--------------------
A ``DispatchRateLimiter`` holds one level's limit (broker, topic, subscription or resource group), a ``Rate`` of
msgs and bytes per ``period_s`` (Pulsar's ratePeriodInSecond), enforced together (logical AND); an unlimited
dimension has no bucket. Pulsar's dispatch limiters add a period's tokens once per period, so each bucket is an
``AsyncTokenBucket(rate=limit, capacity=limit, resolution_s=0)`` read through a ``_PeriodClock`` whose time
stands still inside a period and jumps at its end (periods aligned to the limiter's creation): the bucket gains
exactly ``limit`` tokens at each period boundary and none in between, capped at ``limit`` *after* subtracting
what was delivered. So a debt carries over: 11 delivered at 10/period leaves -1, and the next period has 9.
(A continuously refilled bucket that starts full would let 11 periods' worth through in the first 10.)
Resolution 0 keeps every read exact; dispatch decides per read, not per message, so exactness is cheap here.

A ``Dispatcher`` is one subscription's (on one partition) view of its limiters, checked in Pulsar's order:
broker, topic, subscription, resource group. ``plan_read(permits)`` sizes the next read:

1. messages to read = ``min(permits, dispatcher_max_read_batch_size)`` (100); with
   ``precise_dispatcher_flow_control`` (on by default here; Pulsar's default is off, the cause of #4777) entries =
   ``ceil(msgs / max(1, avg msgs per entry))``, else one entry per message.
2. If any level has no permits (msgs or bytes tokens <= 0): back off -- ``ReadPlan.backoff_s`` (1 s, Pulsar's),
   a decision returned to the caller, not a sleep; ``throttled_by`` names the level.
3. Else shrink the read to what every level has left: msg permits -> entries as in 1 (entries themselves when
   ``dispatch_throttling_on_batch_message`` counts entries); byte permits -> ``max(1, floor(bytes / avg entry
   bytes))`` entries (one entry while no average is known).
4. Reserve the read's estimate (entries x avg msgs per entry, entries x avg entry bytes) on every level at once,
   under all their locks (taken in creation order, so no deadlock). This is what Pulsar lacks: it checks, reads,
   and charges only after sending, so subscriptions sharing a topic limit all see the same permits and all read
   them (#8599), and batched or large entries overshoot by whole reads (#4777: 58x, #18699: 11.9x).
5. ``charge(msgs, bytes, entries, plan)`` after delivery settles the reservation with what was really sent
   (entries instead of msgs with ``dispatch_throttling_on_batch_message``); over-delivery becomes debt, an
   over-estimate is given back (never above a bucket's capacity). Charge every plan exactly once (0s if the read
   found nothing).

With ``dispatch_throttling_on_non_backlog_consumer=False``, reads for a subscription without backlog are neither
throttled nor charged (Pulsar: dispatchThrottlingOnNonBacklogConsumerEnabled). A partitioned topic's limit applies
to each partition: give every partition its own topic limiter (``per_partition``), shared by that partition's
subscriptions. ``resolve_dispatch_rate`` picks a limit by precedence: topic policy > namespace policy > broker.

Worked example (topic limit 10 msgs/s shared by subscriptions A and B; entries hold 4 msgs on average)
----------------------------------------------------------------------------------------------------
t=0.0  A.plan_read(1000): min(1000, 100) = 100 msgs -> 25 entries; topic has 10 -> ceil(10/4) = 3 entries;
       reserves 12 -> topic tokens -2.            ReadPlan(entries=3, max_msgs=10)
t=0.0  B.plan_read(1000): topic tokens -2 <= 0 -> ReadPlan(entries=0, backoff_s=1.0, throttled_by=topic).
t=0.1  A delivers 3 entries holding 11 msgs: charge(11, ..., plan) -> 11 - 12 = -1 given back: tokens -1.
t=1.0  next period: tokens min(10, -1 + 10) = 9 -- 11 delivered at 10/s leaves 9.

Consistency rules
-----------------
1. Tokens change only under the limiter's lock; a plan checks and reserves on all its levels atomically, so
   concurrent subscriptions never read the same permits twice.
2. Over any N whole periods a level delivers at most N x limit plus what the reads in flight at the end deliver
   beyond their reserved estimates (less than one read's messages when a read's permits are under the batch size:
   its reservation then covers all the permits, so no second read can start before it is charged).
3. A live ``rate`` change keeps the current balance (and any debt), trimmed to the new limit; the new limit's
   tokens come at the next period boundary. Removing a dimension's limit drops its bucket.
"""

from __future__ import annotations

import itertools
import math
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from .bucket import AsyncTokenBucket
from .checks import positive
from .clock import Clock, SystemClock, seconds_to_ns
from .policy import Level, PolicyError, Rate, resolve

__all__ = ["DispatchRateLimiter", "Dispatcher", "ReadPlan", "resolve_dispatch_rate",
           "resolve_subscription_dispatch_rate", "per_partition", "DEFAULT_READ_BATCH_SIZE", "DEFAULT_BACKOFF_S"]

DEFAULT_READ_BATCH_SIZE = 100
DEFAULT_BACKOFF_S = 1.0
_INF = math.inf
_ORDER = itertools.count()


class _PeriodClock:
    """``clock`` seen in whole periods from ``origin_ns``: still inside a period, jumping at each boundary."""

    def __init__(self, clock: Clock, origin_ns: int, period_ns: int):
        self._clock, self._origin_ns, self._period_ns = clock, origin_ns, period_ns
        self.tick_cell = [origin_ns]

    def now_ns(self) -> int:
        elapsed = max(0, self._clock.now_ns() - self._origin_ns)
        self.tick_cell[0] = now = self._origin_ns + elapsed // self._period_ns * self._period_ns
        return now

    snapshot_ns = now_ns

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)


class DispatchRateLimiter:
    """One level's dispatch limit: msgs and bytes buckets refilled once per period (see the module essay)."""

    def __init__(self, rate: Rate, level: Level = Level.TOPIC, name: str = "", clock: Clock | None = None):
        if not isinstance(level, Level):
            raise PolicyError(f"level must be a Level (broker, topic, subscription, resource_group), got {level!r}")
        self.level, self.name = level, name
        self.throttled_count = 0  # reads this level sent into backoff
        self._clock = clock or SystemClock()
        self._origin_ns = self._clock.now_ns()
        self._lock = threading.RLock()
        self._order = next(_ORDER)
        self._msgs: AsyncTokenBucket | None = None
        self._bytes: AsyncTokenBucket | None = None
        self.capacity: tuple[float, float] | None = None   # set: the buckets are pools filled by ``deposit``
        self.rate = rate

    @property
    def rate(self) -> Rate:
        return self._rate

    @rate.setter
    def rate(self, rate: Rate) -> None:
        if not isinstance(rate, Rate):
            raise PolicyError(f"a dispatch rate must be a Rate(msgs, bytes, period_s), got {rate!r}")
        with self._lock:
            self._msgs = self._bucket(rate.msgs if rate.msgs_limited else None, rate.period_s, self._msgs)
            self._bytes = self._bucket(rate.bytes if rate.bytes_limited else None, rate.period_s, self._bytes)
            self._rate, self.capacity = rate, None

    def pool(self, rate: Rate, capacity: tuple[float, float]) -> None:
        """Make the buckets pools: they hold up to ``capacity`` (msgs, bytes), refill at ``rate`` (next to
        nothing) and otherwise only by ``deposit`` -- a shared limit's granted tokens. The balance carries over."""
        with self._lock:
            for attr, limited, cap in (("_msgs", rate.msgs_limited, capacity[0]), ("_bytes", rate.bytes_limited,
                                                                                    capacity[1])):
                old = getattr(self, attr)
                bucket = None
                if limited and cap > 0:
                    tokens = 0.0 if old is None else min(old.tokens(), cap)
                    bucket = AsyncTokenBucket(rate=rate.msgs if attr == "_msgs" else rate.bytes, capacity=cap,
                                              initial_tokens=tokens, resolution_s=0, clock=self._clock)
                setattr(self, attr, bucket)
            self._rate, self.capacity = rate, capacity

    def deposit(self, msgs: float = 0, bytes_: float = 0) -> None:
        """Add granted tokens (negative: take them back), not counted as delivered."""
        with self._lock:
            for bucket, n in ((self._msgs, msgs), (self._bytes, bytes_)):
                if bucket is not None and n:
                    bucket.deposit(n)

    def balance(self) -> tuple[float | None, float | None]:
        with self._lock:
            return (None if self._msgs is None else self._msgs.tokens(),
                    None if self._bytes is None else self._bytes.tokens())

    def _bucket(self, limit: float | None, period_s: float, old: AsyncTokenBucket | None) -> AsyncTokenBucket | None:
        if limit is None:
            return None
        tokens = limit if old is None else min(old.tokens(), limit)
        clock = _PeriodClock(self._clock, self._origin_ns, seconds_to_ns(period_s))
        return AsyncTokenBucket(rate=limit, capacity=limit, initial_tokens=tokens, period_s=period_s,
                                resolution_s=0, clock=clock)

    def available_msgs(self) -> float:
        with self._lock:
            return _INF if self._msgs is None else self._msgs.tokens()

    def available_bytes(self) -> float:
        with self._lock:
            return _INF if self._bytes is None else self._bytes.tokens()

    def has_permits(self) -> bool:
        with self._lock:
            return self.available_msgs() > 0 and self.available_bytes() > 0

    def consume(self, msgs: float, bytes_: float) -> None:
        """Charge delivered msgs and bytes (the balance may go negative: debt); negative amounts give tokens
        back, never above the capacity."""
        with self._lock:
            for bucket, n in ((self._msgs, msgs), (self._bytes, bytes_)):
                if bucket is None or n == 0:
                    continue
                if n < 0:
                    n = -min(-n, bucket.capacity - bucket.tokens())
                if n:
                    bucket.consume(n)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"level": self.level.value, "name": self.name, "msgs_limit": self._rate.msgs,
                    "bytes_limit": self._rate.bytes, "period_s": self._rate.period_s,
                    "msgs_tokens": self.available_msgs(), "bytes_tokens": self.available_bytes(),
                    "throttled_count": self.throttled_count}

    def __repr__(self) -> str:
        return f"DispatchRateLimiter({self.level.value} {self.name!r}: {self._rate})"


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What to read next: ``entries`` (0 and ``backoff_s`` > 0: retry after that; 0 and no backoff: the
    consumers have no permits). ``max_msgs``/``max_bytes`` are the permits left (inf: unlimited)."""

    entries: int
    max_msgs: float = _INF
    max_bytes: float = _INF
    backoff_s: float = 0.0
    throttled_by: Level | None = None
    reserved_msgs: float = 0.0
    reserved_bytes: float = 0.0
    throttled: bool = True  # False: exempt (no backlog), charges are skipped


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


class Dispatcher:
    """One subscription's read sizing under its levels' limiters (see the module essay). Thread-safe."""

    def __init__(self, *, broker: DispatchRateLimiter | None = None, topic: DispatchRateLimiter | None = None,
                 subscription: DispatchRateLimiter | None = None,
                 resource_group: DispatchRateLimiter | None = None,
                 dispatcher_max_read_batch_size: int = DEFAULT_READ_BATCH_SIZE,
                 precise_dispatcher_flow_control: bool = True, dispatch_throttling_on_batch_message: bool = False,
                 dispatch_throttling_on_non_backlog_consumer: bool = True, backoff_s: float = DEFAULT_BACKOFF_S):
        levels = [lim for lim in (broker, topic, subscription, resource_group) if lim is not None]
        if any(not isinstance(lim, DispatchRateLimiter) for lim in levels):
            raise PolicyError(f"dispatch levels must be DispatchRateLimiter or None, got {levels!r}")
        if isinstance(dispatcher_max_read_batch_size, bool) or not isinstance(dispatcher_max_read_batch_size, int) \
                or dispatcher_max_read_batch_size < 1:
            raise ValueError(f"dispatcher_max_read_batch_size must be an integer >= 1, "
                             f"got {dispatcher_max_read_batch_size!r}")
        positive("backoff_s", backoff_s, unit="seconds")
        self.levels = levels
        self._locks = sorted({id(lim): lim for lim in levels}.values(), key=lambda lim: lim._order)
        self.read_batch_size = dispatcher_max_read_batch_size
        self.precise = precise_dispatcher_flow_control
        self.count_entries = dispatch_throttling_on_batch_message
        self.throttle_non_backlog = dispatch_throttling_on_non_backlog_consumer
        self.backoff_s = float(backoff_s)
        self._lock = threading.Lock()
        self._sums = [0.0, 0.0, 0.0]  # decayed msgs, bytes, entries delivered: the averages per entry

    def averages(self) -> tuple[float, float | None]:
        """(msgs per entry, bytes per entry or None), from what this dispatcher delivered recently."""
        with self._lock:
            msgs, bytes_, entries = self._sums
        return (max(1.0, msgs / entries), bytes_ / entries) if entries else (1.0, None)

    def plan_read(self, permits: int, has_backlog: bool = True) -> ReadPlan:
        """Size the next read for consumers holding ``permits`` message permits; reserves its estimate."""
        msgs = min(_count("permits", permits), self.read_batch_size)
        if msgs == 0:
            return ReadPlan(0, 0, 0)
        per_entry, entry_bytes = self.averages()
        entries = self._entries_for(msgs, per_entry)
        if not self.levels or not (has_backlog or self.throttle_non_backlog):
            return ReadPlan(entries, throttled=False)
        with ExitStack() as stack:
            for limiter in self._locks:
                stack.enter_context(limiter._lock)
            max_msgs = max_bytes = _INF
            for limiter in self.levels:
                left_msgs, left_bytes = limiter.available_msgs(), limiter.available_bytes()
                if left_msgs <= 0 or left_bytes <= 0:
                    limiter.throttled_count += 1
                    return ReadPlan(0, 0, 0, self.backoff_s, limiter.level)
                max_msgs, max_bytes = min(max_msgs, left_msgs), min(max_bytes, left_bytes)
            if max_msgs < _INF:
                entries = min(entries, self._entries_for(math.ceil(max_msgs), per_entry))
            if max_bytes < _INF:
                entries = min(entries, max(1, math.floor(max_bytes / entry_bytes)) if entry_bytes else 1)
            reserved_msgs = entries if self.count_entries else entries * per_entry
            reserved_bytes = entries * (entry_bytes or 0.0)
            for limiter in self.levels:
                limiter.consume(reserved_msgs, reserved_bytes)
            return ReadPlan(entries, max_msgs, max_bytes, reserved_msgs=reserved_msgs, reserved_bytes=reserved_bytes)

    def _entries_for(self, msgs: int, per_entry: float) -> int:
        if self.count_entries or not self.precise:
            return msgs
        return max(1, math.ceil(msgs / per_entry))

    def charge(self, msgs: int, bytes_: int, entries: int, plan: ReadPlan | None = None,
               has_backlog: bool = True) -> None:
        """After delivery: charge what was sent on every level, settling ``plan``'s reservation (once per plan)."""
        msgs, bytes_, entries = _count("msgs", msgs), _count("bytes", bytes_), _count("entries", entries)
        if entries:
            with self._lock:
                self._sums = [0.9 * s + v for s, v in zip(self._sums, (msgs, bytes_, entries), strict=True)]
        exempt = not plan.throttled if plan is not None else not (has_backlog or self.throttle_non_backlog)
        if exempt:
            return
        permits = entries if self.count_entries else msgs
        reserved_msgs, reserved_bytes = (plan.reserved_msgs, plan.reserved_bytes) if plan else (0.0, 0.0)
        for limiter in self.levels:
            limiter.consume(permits - reserved_msgs, bytes_ - reserved_bytes)


def _policy(name: str, value: Any) -> Rate | None:
    if value is not None and not isinstance(value, Rate):
        raise PolicyError(f"{name} must be a Rate or None (not set), got {value!r}")
    return value


def resolve_dispatch_rate(topic_policy: Rate | None, namespace_policy: Rate | None,
                          broker_default: Rate | None) -> tuple[Rate, Level | None]:
    """A topic's dispatch rate: topic policy > namespace policy > broker config (unlimited when none is set)."""
    return resolve((Level.TOPIC, _policy("topic_policy", topic_policy)),
                   (Level.NAMESPACE, _policy("namespace_policy", namespace_policy)),
                   (Level.BROKER, _policy("broker_default", broker_default)))


def resolve_subscription_dispatch_rate(topic_policy: Rate | None, namespace_policy: Rate | None,
                                       broker_default: Rate | None) -> tuple[Rate, Level | None]:
    """A subscription's dispatch rate, by the same precedence (the topic's, the namespace's subscription
    policy, then dispatchThrottlingRatePerSubscription*)."""
    return resolve_dispatch_rate(topic_policy, namespace_policy, broker_default)


def per_partition(rate: Rate, partitions: int, name: str = "", level: Level = Level.TOPIC,
                  clock: Clock | None = None) -> list[DispatchRateLimiter]:
    """One limiter per partition, each with the full ``rate`` (Pulsar: a partitioned topic's limit is per
    partition, so N partitions together may dispatch N x rate)."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ValueError(f"partitions must be an integer >= 1, got {partitions!r}")
    clock = clock or SystemClock()
    return [DispatchRateLimiter(rate, level, f"{name}-partition-{i}", clock) for i in range(partitions)]
