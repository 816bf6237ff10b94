"""PublishLimits: the limiters of every level in one process, and which of them apply to a producer.

How it works and why
--------------------
One ``PublishLimits`` per process (per broker, in Pulsar's words) owns one ``PublishRateLimiter`` per
(level, name) -- created on first use, unlimited until a limit is set -- and hands out producers wired to every
level that applies to them, in this order:

    broker "broker"  ->  resource group (the topic's, else the namespace's, else the tenant's)  ->  tenant  ->
    namespace  ->  topic

A producer is charged at all of them and pauses while any one says so (its ThrottleTracker counts a reason
per level). Names: a tenant ``acme``, a namespace ``acme/web``, a topic ``acme/web/clicks`` (one partition of a
partitioned topic is its own topic: ``acme/web/clicks-partition-0``, so its limit applies to each partition).

Which limit a level enforces:
- broker, tenant, namespace, resource group: ``set_limit(level, name, rate)``, the aggregate over everything
  under that node. For the levels that span processes this is the *local* share (the participant runtime sets it
  from the shared quota); this module only enforces what it is given.
- topic: the topic's own limit by precedence, topic policy > namespace policy > broker default
  (``set_topic_policy``; Pulsar's namespace ``publishRate`` is the default for each topic of the namespace).
  ``effective_topic_rate(topic)`` says what applies and from which level.

Attaching or detaching a resource group rebinds the producers it concerns; a throttle already in progress runs
out normally (the old limiter still unthrottles its queue).

``initial_rate`` (optional): ``fn(level, name) -> Rate | None`` gives a limiter its rate when it is created, so
a limiter made between two control-plane answers starts at the last known local share instead of unlimited
(None: the default above). It is called under the registry's lock: it must be quick and must not call back
into this object. ``bound()`` tells, per (level, name), what its live producers say, read in one pass: how many
there are and how many are paused (the participant runtime turns a limiter's throttle time into the fraction of
time its producers were paused), the other limiters each passes, and what they have in hand to send.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from .clock import Clock, Scheduler, SystemClock, scheduler_for
from .policy import Level, PolicyError, Rate, resolve
from .producer import Producer
from .publish import LimiterSnapshot, PublishRateLimiter
from .registry import forget_unbound, limiter_for

__all__ = ["PublishLimits", "Bound", "split_topic", "resource_group_for"]

BROKER_NAME = "broker"


def split_topic(topic: str) -> tuple[str, str, str]:
    """``"acme/web/clicks"`` -> ``("acme", "acme/web", "acme/web/clicks")``; a clear error for anything else."""
    name = topic.removeprefix("persistent://").removeprefix("non-persistent://")
    parts = name.split("/")
    if len(parts) != 3 or not all(parts):
        raise PolicyError(f"a topic is named tenant/namespace/topic (e.g. 'acme/web/clicks'), got {topic!r}")
    return parts[0], f"{parts[0]}/{parts[1]}", name


def resource_group_for(topic: str, attached: Callable[[Level, str], str | None]) -> tuple[str, Level, str] | None:
    """The resource group that applies to ``topic`` -- its own, else its namespace's, else its tenant's (one
    applies) -- as (group, the level that attaches it, that level's name); None: none does. ``attached(level,
    name)`` is the group attached to that tenant, namespace or topic, or None. The one place this rule is
    written: the participants' limiters, the policy document and the dashboard all ask it."""
    tenant, namespace, topic = split_topic(topic)
    for level, target in ((Level.TOPIC, topic), (Level.NAMESPACE, namespace), (Level.TENANT, tenant)):
        group = attached(level, target)
        if group is not None:
            return group, level, target
    return None


Key = tuple[Level, str]


@dataclass
class Bound:
    """The live producers bound to one limiter (``PublishLimits.bound``): how many, how many are paused (by
    whichever level), for each the other limiters it passes (a send passes all of a producer's), and the messages
    they said are in hand to send and did not send yet (``Producer.will_send``; None unless every one said: what
    one that never said will send is not known)."""

    producers: int = 0
    paused: int = 0
    paths: list[tuple[Key, ...]] = field(default_factory=list)
    coming_msgs: float | None = 0.0


class PublishLimits:
    """Every publish limiter of one process, by level and name. See the module essay."""

    def __init__(self, clock: Clock | None = None, scheduler: Scheduler | None = None, resolution_s: float | None = None,
                 initial_rate: Callable[[Level, str], Rate | None] | None = None):
        self._clock = clock or SystemClock()
        self.initial_rate = initial_rate
        self.on_throttle: Callable[[], None] | None = None   # given to every limiter made (a producer waits)
        self._scheduler = scheduler or scheduler_for(self._clock)
        self._resolution_kw = {} if resolution_s is None else {"resolution_s": resolution_s}
        self._lock = threading.RLock()
        self._limiters: dict[tuple[Level, str], PublishRateLimiter] = {}
        self._topic_policies: dict[tuple[Level, str], Rate] = {}
        self._groups: dict[tuple[Level, str], str] = {}  # (TENANT|NAMESPACE|TOPIC, name) -> resource group
        self._producers: weakref.WeakSet[Producer] = weakref.WeakSet()
        self._topic_of: weakref.WeakKeyDictionary[Producer, str] = weakref.WeakKeyDictionary()

    @property
    def clock(self) -> Clock:
        return self._clock

    # --- limiters -----------------------------------------------------------------------------------------

    def limiter(self, level: Level, name: str = BROKER_NAME) -> PublishRateLimiter:
        return limiter_for(self._limiters, self._lock, level, name, self.initial_rate, self._new_limiter)

    def _new_limiter(self, level: Level, name: str, rate: Rate | None) -> PublishRateLimiter:
        if rate is None:  # the hook had no answer: a topic's limit by precedence, any other level unlimited
            rate = self._topic_rate(name)[0] if level is Level.TOPIC else Rate.unlimited()
        limiter = PublishRateLimiter(rate, level=level, name=name, clock=self._clock, scheduler=self._scheduler,
                                     **self._resolution_kw)
        limiter.on_throttle = self.on_throttle
        return limiter

    def forget(self, keys: list[Key]) -> list[Key]:
        """Drop the limiters of ``keys`` that no live producer is bound to (a producer made meanwhile keeps its own;
        the next one gets a new limiter at ``initial_rate``) and return their keys. For limiters nothing uses any
        more: what they counted goes with them (``collectors.idle_limiters``)."""
        def bound_ids() -> set[int]:
            return {id(limiter) for producer in self._producers for limiter in producer.limiters}
        gone = forget_unbound(self._limiters, self._lock, keys, bound_ids)
        for limiter in gone:
            limiter.close()
        return [(limiter.level, limiter.name) for limiter in gone]

    def set_limit(self, level: Level, name: str, rate: Rate | None) -> None:
        """The aggregate limit of a broker, tenant, namespace or resource group (None or unlimited: no limit)."""
        level = Level(level)
        if level in (Level.TOPIC, Level.SUBSCRIPTION):
            raise PolicyError(f"a {level} limit comes from policies by precedence: use set_topic_policy, "
                              "not set_limit (set_limit takes broker, resource_group, tenant or namespace)")
        self.limiter(level, name).update_rate(rate or Rate.unlimited())

    # --- topic precedence ---------------------------------------------------------------------------------

    def set_topic_policy(self, level: Level, name: str | None, rate: Rate | None) -> None:
        """A topic-limit policy set at topic, namespace (default per topic) or broker (default) level."""
        level = Level(level)
        if level not in (Level.TOPIC, Level.NAMESPACE, Level.BROKER):
            raise PolicyError(f"topic limits are set at topic, namespace or broker level, not {level}")
        key = (level, name if level is not Level.BROKER else BROKER_NAME)
        with self._lock:
            if rate is None:
                self._topic_policies.pop(key, None)
            else:
                self._topic_policies[key] = rate
            for (lvl, topic), limiter in list(self._limiters.items()):
                if lvl is Level.TOPIC:
                    limiter.update_rate(self._topic_rate(topic)[0])

    def effective_topic_rate(self, topic: str) -> tuple[Rate, Level | None]:
        with self._lock:
            return self._topic_rate(split_topic(topic)[2])

    def _topic_rate(self, topic: str) -> tuple[Rate, Level | None]:
        _, namespace, topic = split_topic(topic)
        policies = self._topic_policies
        return resolve(
            (Level.TOPIC, policies.get((Level.TOPIC, topic))),
            (Level.NAMESPACE, policies.get((Level.NAMESPACE, namespace))),
            (Level.BROKER, policies.get((Level.BROKER, BROKER_NAME))),
        )

    # --- resource groups ----------------------------------------------------------------------------------

    def attach_resource_group(self, level: Level, name: str, group: str | None) -> None:
        """Attach ``group`` to a tenant, namespace or topic (None detaches); producers concerned are rebound."""
        level = Level(level)
        if level not in (Level.TENANT, Level.NAMESPACE, Level.TOPIC):
            raise PolicyError(f"resource groups attach to a tenant, a namespace or a topic, not a {level}")
        with self._lock:
            if group is None:
                self._groups.pop((level, name), None)
            else:
                self._groups[(level, name)] = group
            for producer in list(self._producers):
                producer.bind(self._limiters_for(self._topic_of[producer]))

    def resource_group_of(self, topic: str) -> str | None:
        """The topic's own resource group, else its namespace's, else its tenant's (one applies)."""
        with self._lock:
            found = resource_group_for(topic, lambda level, name: self._groups.get((level, name)))
        return None if found is None else found[0]

    # --- producers ----------------------------------------------------------------------------------------

    def producer(self, topic: str, name: str | None = None, **options) -> Producer:
        """A producer on ``topic`` (tenant/namespace/topic), wired to every level that applies to it."""
        _, _, topic = split_topic(topic)
        with self._lock:
            producer = Producer(name or topic, self._limiters_for(topic), clock=self._clock,
                                scheduler=self._scheduler, **options)
            self._producers.add(producer)
            self._topic_of[producer] = topic
            return producer

    def _limiters_for(self, topic: str) -> list[PublishRateLimiter]:
        tenant, namespace, topic = split_topic(topic)
        chain = [self.limiter(Level.BROKER, BROKER_NAME)]
        group = self.resource_group_of(topic)
        if group is not None:
            chain.append(self.limiter(Level.RESOURCE_GROUP, group))
        chain += [self.limiter(Level.TENANT, tenant), self.limiter(Level.NAMESPACE, namespace),
                  self.limiter(Level.TOPIC, topic)]
        return chain

    # --- inspection ---------------------------------------------------------------------------------------

    def limiters(self) -> list[PublishRateLimiter]:
        with self._lock:
            return list(self._limiters.values())

    def bound(self) -> dict[Key, Bound]:
        """(level, name) -> what the live producers bound to that limiter say (``Bound``), in one pass over them."""
        with self._lock:
            producers = list(self._producers)
        out: dict[Key, Bound] = {}
        for producer in producers:
            keys = [(limiter.level, limiter.name) for limiter in producer.limiters]
            paused, msgs = producer.paused, producer.coming_msgs
            for key in keys:
                b = out.get(key)
                if b is None:
                    b = out[key] = Bound()
                b.producers += 1
                b.paused += paused
                b.paths.append(tuple(k for k in keys if k != key))
                b.coming_msgs = None if msgs is None or b.coming_msgs is None else b.coming_msgs + msgs
        return out

    def producer_counts(self, paused_only: bool = False) -> dict[Key, int]:
        """(level, name) -> number of live producers bound to that limiter (``paused_only``: of those paused now,
        by whichever level; only the limiters that have one)."""
        counts = {key: b.paused if paused_only else b.producers for key, b in self.bound().items()}
        return {key: n for key, n in counts.items() if n or not paused_only}

    def snapshots(self) -> list[LimiterSnapshot]:
        return [limiter.snapshot() for limiter in self.limiters()]

    def close(self) -> None:
        for limiter in self.limiters():
            limiter.close()
