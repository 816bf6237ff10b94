"""Applying the control plane's answer: policies -> every local limiter's limit; usage map -> local shares.

How it works and why
--------------------
A participant holds limiters by (level, name) for publish (``limiter.PublishLimits``) and dispatch
(``collectors.dispatching.DispatchLimits``). For each one, ``PolicyView.limit(level, direction, name)`` says
what the policies configure there and whether it is *shared* (spans participants):

==============  ==================================================================================  ========
level           configured limit                                                                    shared?
==============  ==================================================================================  ========
broker          broker settings ``brokerPublishThrottlingMax*Rate`` / ``dispatchThrottlingRateIn*``  no
resource_group  the group's ``publishRateIn*`` / ``dispatchRateIn*`` (per second)                    yes
tenant          the tenant aggregate ``publishRate`` / ``dispatchRate`` (throttlescope extension)    yes
namespace       none: a namespace policy is the default *per topic* (Pulsar), not a total            --
topic           by precedence: topic policy > namespace policy > broker default per topic           yes
subscription    by precedence: topic's > namespace's ``subscriptionDispatchRate`` > broker default   yes
==============  ==================================================================================  ========

(the precedence is ``limiter.policy.resolve``; a resource group applies to a topic through its namespace,
else its tenant, as ``PublishLimits.resource_group_of`` binds producers.)

A limiter's local rate is then ``local_share(limit, me, peers)``: not shared or unlimited -> the configured
rate itself; shared -> this participant's share of it, by the limit's strategy (``PolicySet.quota_strategy``:
the group's ``quotaStrategy``, else the broker setting ``defaultQuotaStrategy``, else ``fair``), computed with
``limiter.quota.local_quotas`` over the usage map the control plane relayed for that limit -- each dimension
(msgs, bytes) on its own, in per-second units, then scaled back to the limit's period. Every participant runs
the same function on the same map, so the shares add up to the limit. A participant alone in the map, or with
no map yet (a limit it has not reported), gets the whole configured limit (PIP-82: "total usage 0 ->
configured"); the next answer corrects it.

The local bucket of a shared limit holds at most ``shared_burst_s`` seconds of its local share (half a report
interval, ``BURST_INTERVALS``; never more than one period): N participants each bursting a full period would add
N periods of burst to the aggregate, and the shares cannot correct anything faster than one interval. What a
participant stored while using less than its share is spent the moment its demand rises -- an overshoot of the
aggregate, and with the proportional strategy a kick that moves the split for good (usage is all it sees) -- so
the store is kept to what absorbs scheduling jitter.

Rates change only when they move: by more than ``DEAD_BAND`` (0.5 %) for a share computed from several
participants (noise in measured usage would otherwise re-plan every limiter every round, and a raised limit
releases its queued producers at once), exactly otherwise (an operator's change of 1 msg/s is applied).

Newly created limiters start at ``target(level, direction, name)`` (the ``initial_rate`` hook of both
registries), so a producer created between two answers is limited from its first send. The hook reads only
immutable snapshots (``_view`` and ``_peers`` are replaced, never mutated), so it takes no lock.

Re-learning after an outage: a restarted control plane knows nobody; the first participant back would find itself
alone in every map and take every whole limit -- a burst as the others come back. So for ``grace_s`` after a
reconnection (the backoff cap plus 2 intervals: by then everyone alive has reported) peers missing from a map
are kept with their last known values. Outside that window the control plane's map is trusted as it is (it
expires the silent and removes those who said goodbye).

Everything else the policies carry is per participant: offload flow permits
(``managedLedgerOffloadBrokerFlowPermitsPerSecond`` -> ``OffloadThrottle.bytes_per_s``), mutation quotas per
(user, client-id) (-> ``MutationQuotaRegistry.apply``; -1 = an explicitly unlimited entry, kept as
``UNLIMITED_MUTATIONS_PER_S`` so it still overrides a ``<default>``), and the dispatcher flags.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from limiter.dispatch import DispatchRateLimiter
from limiter.levels import PublishLimits, split_topic
from limiter.mutation import MutationQuotaConfig, MutationQuotaRegistry
from limiter.offload import OffloadThrottle
from limiter.policy import Level, PolicyError, Rate, resolve
from limiter.publish import PublishRateLimiter
from limiter.quota import DEFAULT_MIN_SHARE, Strategy, local_quotas
from metrics.report import PolicySet, UsageValues, limit_key, to_rate

from .dispatching import DispatchLimits

__all__ = ["PolicyView", "Limit", "Applier", "local_share", "PUBLISH", "DISPATCH", "SHARED_LEVELS",
           "DEAD_BAND", "UNLIMITED_MUTATIONS_PER_S", "BURST_INTERVALS"]

log = logging.getLogger(__name__)

PUBLISH, DISPATCH = "publish", "dispatch"
SHARED_LEVELS = frozenset({Level.RESOURCE_GROUP, Level.TENANT, Level.NAMESPACE, Level.TOPIC, Level.SUBSCRIPTION})
DEAD_BAND = 0.005
BURST_INTERVALS = 0.5   # a shared limit's local bucket holds half a report interval of its share
UNLIMITED_MUTATIONS_PER_S = 1e12
_UNLIMITED = Rate.unlimited()


@dataclass(frozen=True, slots=True)
class Limit:
    """What the policies configure at one (level, direction, name)."""

    rate: Rate
    shared: bool
    strategy: Strategy = Strategy.FAIR
    source: str | None = None  # where it came from: 'topic', 'namespace', 'broker', 'resource_group', ...


_NO_LIMIT = Limit(_UNLIMITED, False)


class PolicyView:
    """Lookups over one ``PolicySet`` (immutable once built)."""

    def __init__(self, ps: PolicySet):
        self.ps = ps
        self.version = ps.version
        self.settings = ps.brokerSettings
        self.default_strategy = Strategy.parse(ps.quota_strategy())
        self._warned: set[tuple] = set()

    def _setting(self, name: str, default: float = -1) -> float:
        value = self.settings.get(name, default)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else default

    def _flag(self, name: str, default: bool) -> bool:
        value = self.settings.get(name, default)
        return value if isinstance(value, bool) else default

    def _broker_rate(self, msgs: str, bytes_: str) -> Rate:
        return Rate(self._setting(msgs), self._setting(bytes_), 1)

    def resource_group_of(self, topic: str) -> str | None:
        tenant, namespace, _ = split_topic(topic)
        return self.ps.namespaceResourceGroups.get(namespace) or self.ps.tenantResourceGroups.get(tenant)

    def attachments(self) -> dict[tuple[Level, str], str]:
        out = {(Level.TENANT, t): g for t, g in self.ps.tenantResourceGroups.items()}
        out.update({(Level.NAMESPACE, n): g for n, g in self.ps.namespaceResourceGroups.items()})
        return out

    def limit(self, level: Level, direction: str, name: str) -> Limit:
        try:
            return self._limit(Level(level), direction, name)
        except (PolicyError, ValueError) as e:  # a lenient answer with a value we cannot use: no limit
            if (level, direction, name) not in self._warned:
                self._warned.add((level, direction, name))
                log.warning("cannot use the %s %s limit of %r from policy version %s: %s", level, direction, name,
                            self.version, e)
            return _NO_LIMIT

    def _limit(self, level: Level, direction: str, name: str) -> Limit:
        publish = direction == PUBLISH
        if level is Level.BROKER:
            rate = (self._broker_rate("brokerPublishThrottlingMaxMessageRate", "brokerPublishThrottlingMaxByteRate")
                    if publish else self._broker_rate("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte"))
            return Limit(rate, False, source="broker")
        if level is Level.RESOURCE_GROUP:
            rg = self.ps.resourceGroups.get(name)
            if rg is None:
                return Limit(_UNLIMITED, True)
            rate = (Rate(rg.publishRateInMsgs, rg.publishRateInBytes, 1) if publish
                    else Rate(rg.dispatchRateInMsgs, rg.dispatchRateInBytes, 1))
            return Limit(rate, True, Strategy.parse(self.ps.quota_strategy(name)), "resource_group")
        if level is Level.TENANT:
            tp = self.ps.tenants.get(name)
            rate = to_rate(getattr(tp, "publishRate" if publish else "dispatchRate", None)) if tp else None
            return Limit(rate or _UNLIMITED, True, self.default_strategy, "tenant" if rate else None)
        if level is Level.NAMESPACE:
            return Limit(_UNLIMITED, True, self.default_strategy)
        if level is Level.TOPIC:
            _, namespace, topic = split_topic(name)
            policy = "publishRate" if publish else "dispatchRate"
            default = (self._broker_rate("maxPublishRatePerTopicInMessages", "maxPublishRatePerTopicInBytes")
                       if publish else self._broker_rate("dispatchThrottlingRatePerTopicInMsg",
                                                         "dispatchThrottlingRatePerTopicInByte"))
            return self._resolved(topic, namespace, policy, default)
        if level is Level.SUBSCRIPTION:
            if publish:
                return Limit(_UNLIMITED, True, self.default_strategy)
            _, namespace, topic = split_topic("/".join(name.split("/", 3)[:3]))   # t/ns/topic/subscription
            default = self._broker_rate("dispatchThrottlingRatePerSubscriptionInMsg",
                                        "dispatchThrottlingRatePerSubscriptionInByte")
            return self._resolved(topic, namespace, "subscriptionDispatchRate", default)
        return _NO_LIMIT

    def _resolved(self, topic: str, namespace: str, policy: str, default: Rate) -> Limit:
        tp, np_ = self.ps.topics.get(topic), self.ps.namespaces.get(namespace)
        rate, source = resolve((Level.TOPIC, to_rate(getattr(tp, policy, None)) if tp else None),
                               (Level.NAMESPACE, to_rate(getattr(np_, policy, None)) if np_ else None),
                               (Level.BROKER, None if default.is_unlimited else default))
        return Limit(rate, True, self.default_strategy, None if source is None else source.value)

    # --- per-participant settings -------------------------------------------------------------------------

    def offload_bytes_per_s(self) -> float:
        return float(self._setting("managedLedgerOffloadBrokerFlowPermitsPerSecond"))

    def dispatch_options(self) -> dict[str, bool]:
        precise = self._flag("preciseDispatcherFlowControl", False)
        batches = self._flag("dispatchThrottlingOnBatchMessageEnabled", False)
        return {"precise_dispatcher_flow_control": precise and not batches,
                "dispatch_throttling_on_batch_message": batches,
                "dispatch_throttling_on_non_backlog_consumer": self._flag(
                    "dispatchThrottlingOnNonBacklogConsumerEnabled", True)}

    def mutation_configs(self) -> dict[tuple[str, str], MutationQuotaConfig]:
        out = {}
        for e in self.ps.mutationQuotas:
            q = e.quotaPerSecond if e.quotaPerSecond > 0 else UNLIMITED_MUTATIONS_PER_S
            try:
                out[(e.user, e.clientId)] = MutationQuotaConfig(float(q), float(e.windowSeconds), e.samples, e.strict)
            except ValueError as err:
                log.warning("ignoring the mutation quota of (%r, %r): %s", e.user, e.clientId, err)
        return out


def local_share(limit: Limit, me: str, peers: Mapping[str, UsageValues],
                min_share: float = DEFAULT_MIN_SHARE) -> Rate:
    """This participant's local rate for ``limit`` given the usage map ``peers`` (participant -> values, mine
    included; missing: added as zero). Unshared or unlimited: the configured rate; no map: the whole of it."""
    rate = limit.rate
    if not limit.shared or rate.is_unlimited or not peers:
        return rate
    if me not in peers:
        peers = {**peers, me: UsageValues()}
    period = rate.period_s

    def share(cap_per_period: float, usage: Callable[[UsageValues], float],
              demand: Callable[[UsageValues], float]) -> float:
        if cap_per_period <= 0:
            return -1
        quotas = local_quotas(limit.strategy, cap_per_period / period, {p: usage(v) for p, v in peers.items()},
                              {p: demand(v) for p, v in peers.items()}, min_share=min_share)
        return quotas[me] * period

    return Rate(share(rate.msgs, lambda v: v.usage_msgs_per_s, lambda v: v.demand_msgs_per_s),
                share(rate.bytes, lambda v: v.usage_bytes_per_s, lambda v: v.demand_bytes_per_s), period)


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
    """Keeps every local limiter at its target rate from the latest policies and usage maps (see the essay)."""

    def __init__(self, participant_id: str, limits: PublishLimits, dispatch: DispatchLimits,
                 offload: OffloadThrottle | None = None, mutations: MutationQuotaRegistry | None = None,
                 now_s: Callable[[], float] | None = None, min_share: float = DEFAULT_MIN_SHARE):
        self.me = participant_id
        self.limits, self.dispatch, self.offload, self.mutations = limits, dispatch, offload, mutations
        self._now_s = now_s or (lambda: limits.clock.now_ns() / 1e9)
        self.min_share = min_share
        self._view: PolicyView | None = None
        self._peers: dict[str, dict[str, UsageValues]] = {}
        self._attached: dict[tuple[Level, str], str] = {}
        self._grace_until = -math.inf
        self._lock = threading.Lock()
        self.created_at: dict[str, float] = {}  # limit key -> when its limiter was created (for the first rate)
        self.shared_burst_s: float | None = None  # a shared limit's bucket holds this many seconds of its share
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

    def _target(self, level: Level, direction: str, name: str) -> tuple[Rate, bool] | None:
        limit = self.limit(level, direction, name)
        if limit is None:
            return None
        peers = self._peers.get(limit_key(Level(level).value, direction, name)) if limit.shared else None
        try:
            return local_share(limit, self.me, peers or {}, self.min_share), bool(peers) and len(peers) > 1
        except (PolicyError, ValueError) as e:   # values from a lenient answer that do not add up: keep the rate
            log.debug("cannot compute the %s %s share of %r: %s", level, direction, name, e)
            return None

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

    def begin_grace(self, grace_s: float) -> None:
        """After a reconnection: keep peers missing from the maps for ``grace_s`` (see the essay)."""
        self._grace_until = self._now_s() + grace_s

    def apply(self, policies: PolicySet | None = None,
              usage_map: Mapping[str, Mapping[str, UsageValues]] | None = None,
              mine: Mapping[str, UsageValues] | None = None) -> None:
        """Apply new policies (if given) and a usage map (if given; ``mine``: this participant's current values
        for every shared limit it reported), then bring every local limiter to its target."""
        with self._lock:
            if policies is not None:
                self._apply_policies(PolicyView(policies))
            if usage_map is not None:
                self._apply_usage(usage_map, mine or {})
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

    def _apply_usage(self, usage_map: Mapping[str, Mapping[str, UsageValues]],
                     mine: Mapping[str, UsageValues]) -> None:
        grace = self._now_s() < self._grace_until
        peers: dict[str, dict[str, UsageValues]] = {}
        for key, my_values in mine.items():
            relayed = usage_map.get(key) or {}
            merged = dict(relayed)
            if grace:
                for pid, values in self._peers.get(key, {}).items():
                    if pid != self.me:
                        merged.setdefault(pid, values)
            if self.me not in relayed:
                merged[self.me] = my_values
            peers[key] = merged
        self._peers = peers

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
        rate, from_share = found
        moved = _moved(lim.rate, rate, DEAD_BAND if from_share else 0.0)
        if isinstance(lim, PublishRateLimiter):
            shared = lim.level in SHARED_LEVELS and not rate.is_unlimited
            burst = self.shared_burst_s if shared else None
            if moved or lim.burst_s != burst:
                lim.update_rate(rate, burst)
        elif moved:
            lim.rate = rate

    def peers(self, level: Level, direction: str, name: str) -> dict[str, UsageValues]:
        return dict(self._peers.get(limit_key(Level(level).value, direction, name), {}))
