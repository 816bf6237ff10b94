"""What the policies configure at each (level, direction, name): one reading of a ``PolicySet``.

==============  ==================================================================================  ========
level           configured limit                                                                    shared?
==============  ==================================================================================  ========
broker          broker settings ``brokerPublishThrottlingMax*Rate`` / ``dispatchThrottlingRateIn*``  no
resource_group  the group's ``publishRateIn*`` / ``dispatchRateIn*`` (per second)                    yes
tenant          the tenant aggregate ``publishRate`` / ``dispatchRate`` (throttlescope extension)    yes
namespace       none: a namespace policy is the default *per topic* (Pulsar), not a total            --
topic           by precedence: topic policy > namespace policy > broker default per topic           yes
subscription    by precedence: the subscription's own ``dispatchRate`` > topic's > namespace's        yes
                ``subscriptionDispatchRate`` > broker default
==============  ==================================================================================  ========

The per-topic and per-subscription rows are ``applicable``: the candidates, most specific first
(``PolicySet.rate_candidates``), resolved by ``limiter.policy.resolve`` with the broker default last. The resource
group that applies to a topic is its own, else its namespace's, else its tenant's (``PolicySet.resource_group_of``,
by ``limiter.levels.resource_group_for``). Participants read ``PolicyView`` to set their local limiters; the
control plane reads it for the capacity of every shared limit it grants and, through ``applicable``, for Pulsar's
``?applied=true`` and ``effectiveLimits``; the dashboard shows what the control plane answers. Nobody else
derives a limit, so every side agrees by construction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from limiter.levels import resource_group_for, split_topic
from limiter.mutation import MutationQuotaConfig
from limiter.policy import Level, PolicyError, Rate, resolve
from limiter.quota import Strategy

from .policies import DispatchRate, PolicySet, PublishRate, to_rate

__all__ = ["PolicyView", "Limit", "PUBLISH", "DISPATCH", "SHARED_LEVELS", "UNLIMITED_MUTATIONS_PER_S",
           "BROKER_DEFAULTS", "BROKER_TOTALS", "applicable", "setting_rate", "resource_group_for", "split_topic"]

log = logging.getLogger(__name__)

PUBLISH, DISPATCH = "publish", "dispatch"
SHARED_LEVELS = frozenset({Level.RESOURCE_GROUP, Level.TENANT, Level.NAMESPACE, Level.TOPIC, Level.SUBSCRIPTION})
UNLIMITED_MUTATIONS_PER_S = 1e12
_UNLIMITED = Rate.unlimited()
# per-topic / per-subscription policy -> the broker settings of its default (msgs, bytes), per second
BROKER_DEFAULTS = {
    "publishRate": ("maxPublishRatePerTopicInMessages", "maxPublishRatePerTopicInBytes"),
    "dispatchRate": ("dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte"),
    "subscriptionDispatchRate": ("dispatchThrottlingRatePerSubscriptionInMsg",
                                 "dispatchThrottlingRatePerSubscriptionInByte"),
}
# direction -> the broker settings of the broker-level limit, each process on its own (msgs, bytes), per second
BROKER_TOTALS = {
    PUBLISH: ("brokerPublishThrottlingMaxMessageRate", "brokerPublishThrottlingMaxByteRate"),
    DISPATCH: ("dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte"),
}
Candidate = PublishRate | DispatchRate | None


def setting_number(settings: dict, name: str, default: float = -1) -> float:
    """A numeric broker setting; ``default`` when it is missing or not a number."""
    value = settings.get(name, default)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else default


def setting_rate(settings: dict, names: tuple[str, str]) -> Rate:
    """The per-second ``Rate`` of two broker settings (msgs, bytes); a missing or non-numeric one: unlimited."""
    return Rate(setting_number(settings, names[0]), setting_number(settings, names[1]), 1)


def applicable(ps: PolicySet, policy: str, topic: str, subscription: str | None = None
               ) -> tuple[Rate, Level | None, Candidate]:
    """What holds ``topic``'s (or its ``subscription``'s) ``policy`` (publishRate, dispatchRate,
    subscriptionDispatchRate): (the rate, the level that set it -- None: nothing, unlimited --, the policy object
    chosen, None for the broker default). Pulsar's precedence: ``PolicySet.rate_candidates``, then the broker
    default per topic or subscription."""
    candidates = ps.rate_candidates(policy, topic, subscription)
    default = setting_rate(ps.brokerSettings, BROKER_DEFAULTS[policy])
    rate, level = resolve(*((lv, to_rate(value)) for lv, value in candidates),
                          (Level.BROKER, None if default.is_unlimited else default))
    return rate, level, next((value for lv, value in candidates if lv == level), None)


@dataclass(frozen=True, slots=True)
class Limit:
    """What the policies configure at one (level, direction, name)."""

    rate: Rate
    shared: bool
    strategy: Strategy = Strategy.FAIR
    source: str | None = None  # where it came from: 'topic', 'namespace', 'broker', 'resource_group', ...
    # an adaptive limit (``limiter.adaptive``, the messages dimension): the lowest messages per second it goes to;
    # None: not adaptive
    adaptive_floor_per_s: float | None = None
    adaptive_slow_s: float | None = None   # a send the sink took slower than this is congestion too (None: no)


def _adaptive(value: Candidate, rate: Rate) -> dict[str, float | None]:
    """``Limit``'s adaptive fields for ``value``: its floor per second (0: none) and its latency bound in seconds
    (None: none); no floor (None) when it is not adaptive, or cannot be."""
    if not isinstance(value, PublishRate) or not value.adaptive or not rate.msgs_limited:
        return {}
    floor, slow_ms = value.adaptiveFloorInMsg, value.adaptiveSlowMs
    return {"adaptive_floor_per_s": min(floor, rate.msgs) / rate.period_s if floor > 0 else 0.0,
            "adaptive_slow_s": slow_ms / 1000 if slow_ms > 0 else None}


_NO_LIMIT = Limit(_UNLIMITED, False)


MAX_REMEMBERED = 200_000   # limits a view remembers (the control plane asks about every shared limit there is)


class PolicyView:
    """Lookups over one ``PolicySet`` (immutable once built)."""

    def __init__(self, ps: PolicySet):
        self.ps = ps
        self.version = ps.version
        self.settings = ps.brokerSettings
        self.default_strategy = Strategy.parse(ps.quota_strategy())
        self._warned: set[tuple] = set()
        # the limit of each (level, direction, name) asked: the view never changes, and a participant's grant
        # keeper asks for every limiter every 20 ms (working the rules out each time was most of its round:
        # 1.5 ms a round at 10 topics, 15 ms at 100)
        self._limits: dict[tuple[Level, str, str], Limit] = {}

    def _flag(self, name: str, default: bool) -> bool:
        value = self.settings.get(name, default)
        return value if isinstance(value, bool) else default

    def resource_group_of(self, topic: str) -> str | None:
        found = self.ps.resource_group_of(topic)
        return None if found is None else found[0]

    def attachments(self) -> dict[tuple[Level, str], str]:
        out = {(Level.TENANT, t): g for t, g in self.ps.tenantResourceGroups.items()}
        out.update({(Level.NAMESPACE, n): g for n, g in self.ps.namespaceResourceGroups.items()})
        out.update({(Level.TOPIC, t): g for t, g in self.ps.topicResourceGroups.items()})
        return out

    def limit(self, level: Level, direction: str, name: str) -> Limit:
        key = (level, direction, name)
        found = self._limits.get(key)
        if found is not None:
            return found
        try:
            found = self._limit(Level(level), direction, name)
        except (PolicyError, ValueError) as e:  # a lenient answer with a value we cannot use: no limit
            if key not in self._warned:
                self._warned.add(key)
                log.warning("cannot use the %s %s limit of %r from policy version %s: %s", level, direction, name,
                            self.version, e)
            found = _NO_LIMIT
        if len(self._limits) < MAX_REMEMBERED:
            self._limits[key] = found
        return found

    def _limit(self, level: Level, direction: str, name: str) -> Limit:
        publish = direction == PUBLISH
        if level is Level.BROKER:
            return Limit(setting_rate(self.settings, BROKER_TOTALS[direction]), False, source="broker")
        if level is Level.RESOURCE_GROUP:
            rg = self.ps.resourceGroups.get(name)
            if rg is None:
                return Limit(_UNLIMITED, True)
            rate = (Rate(rg.publishRateInMsgs, rg.publishRateInBytes, 1) if publish
                    else Rate(rg.dispatchRateInMsgs, rg.dispatchRateInBytes, 1))
            return Limit(rate, True, Strategy.parse(self.ps.quota_strategy(name)), "resource_group")
        if level is Level.TENANT:
            tp = self.ps.tenants.get(name)
            value = getattr(tp, "publishRate" if publish else "dispatchRate", None) if tp else None
            rate = to_rate(value)
            return Limit(rate or _UNLIMITED, True, self.default_strategy, "tenant" if rate else None,
                         **({} if rate is None else _adaptive(value, rate)))
        if level is Level.NAMESPACE:
            return Limit(_UNLIMITED, True, self.default_strategy)
        if level is Level.TOPIC:
            return self._applicable("publishRate" if publish else "dispatchRate", name)
        if level is Level.SUBSCRIPTION:
            if publish:
                return Limit(_UNLIMITED, True, self.default_strategy)
            tenant, namespace, topic, subscription = name.split("/", 3)   # t/ns/topic/subscription
            return self._applicable("subscriptionDispatchRate", f"{tenant}/{namespace}/{topic}", subscription)
        return _NO_LIMIT

    def _applicable(self, policy: str, topic: str, subscription: str | None = None) -> Limit:
        rate, source, value = applicable(self.ps, policy, topic, subscription)
        return Limit(rate, True, self.default_strategy, None if source is None else source.value,
                     **_adaptive(value, rate))

    # --- per-participant settings -------------------------------------------------------------------------

    def offload_bytes_per_s(self) -> float:
        return float(setting_number(self.settings, "managedLedgerOffloadBrokerFlowPermitsPerSecond"))

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
