"""The policies, Pulsar-shaped, as one document (``PolicySet``) every participant applies.

The objects keep Pulsar's REST names and units (``PublishRate``, ``DispatchRate``, PIP-82's ``ResourceGroup``,
KIP-599's mutation quota); -1 (or 0) is unlimited. They are lenient (``protocol.fields``): the admin API
subclasses them strictly. What limit they set at a (level, direction, name) is read in one place,
``protocol.rules``.
"""

from __future__ import annotations

from pydantic import Field, StrictBool

from limiter.levels import resource_group_for, split_topic
from limiter.policy import Level, Rate

from .fields import (
    QUOTA_STRATEGIES,
    LenientModel,
    LimitValue,
    Period,
    Samples,
    Window,
)

__all__ = [
    "PublishRate", "DispatchRate", "ResourceGroup", "MutationQuota", "MutationQuotaEntry", "LevelPolicies",
    "TenantPolicies", "SubscriptionPolicies", "PolicySet", "to_rate",
]


class PublishRate(LenientModel):
    """Pulsar's PublishRate: messages and bytes per ratePeriodInSecond (-1 = unlimited)."""

    publishThrottlingRateInMsg: LimitValue = Field(-1, description="Messages per period; -1 (or 0) = unlimited")
    publishThrottlingRateInByte: LimitValue = Field(-1, description="Bytes per period; -1 (or 0) = unlimited")
    ratePeriodInSecond: Period = Field(1, description="Period in seconds (1..86400)")
    adaptive: StrictBool = Field(False, description=(
        "throttlescope extension: learn what the sink behind this limit can take from its answers (429s, "
        "Retry-After: limiter.adaptive); publishThrottlingRateInMsg is the ceiling. Shared limits only (a "
        "tenant's or a topic's)"))
    adaptiveFloorInMsg: LimitValue = Field(-1, description=(
        "throttlescope extension: the adaptive rate never goes below this many messages per period; -1 (or 0) = "
        "no floor"))
    adaptiveSlowMs: LimitValue = Field(-1, description=(
        "throttlescope extension: a send the sink took but slower than this many milliseconds says \"too many\" "
        "too (a database's latency climbs before it refuses anything); -1 (or 0) = latency is no signal"))

    def adaptive_error(self) -> str | None:
        """What is wrong with the adaptive settings, None if nothing (the admin API refuses them with it)."""
        msgs, floor = self.publishThrottlingRateInMsg, self.adaptiveFloorInMsg
        if self.adaptive and msgs <= 0:
            return ("adaptive needs a messages limit (publishThrottlingRateInMsg > 0): it is the ceiling the "
                    "adaptive rate learns under")
        if floor > 0 and msgs > 0 and floor > msgs:
            return (f"adaptiveFloorInMsg ({floor:g}) must be <= publishThrottlingRateInMsg ({msgs:g}): the floor is "
                    f"the lowest the adaptive rate goes, the limit the highest")
        return None


class DispatchRate(LenientModel):
    """Pulsar's DispatchRate: messages and bytes per ratePeriodInSecond (-1 = unlimited)."""

    dispatchThrottlingRateInMsg: LimitValue = Field(-1, description="Messages per period; -1 (or 0) = unlimited")
    dispatchThrottlingRateInByte: LimitValue = Field(-1, description="Bytes per period; -1 (or 0) = unlimited")
    ratePeriodInSecond: Period = Field(1, description="Period in seconds (1..86400)")
    relativeToPublishRate: StrictBool = Field(False, description="Pulsar's rate relative to the topic's publish "
                                                                 "rate: not supported, the admin API refuses true")


class ResourceGroup(LenientModel):
    """PIP-82 resource group: a quota shared by everything attached to it (per second; -1 = unlimited)."""

    publishRateInMsgs: LimitValue = Field(-1, description="Messages per second published; -1 = unlimited")
    publishRateInBytes: LimitValue = Field(-1, description="Bytes per second published; -1 = unlimited")
    dispatchRateInMsgs: LimitValue = Field(-1, description="Messages per second dispatched; -1 = unlimited")
    dispatchRateInBytes: LimitValue = Field(-1, description="Bytes per second dispatched; -1 = unlimited")
    quotaStrategy: str | None = Field(
        None, description="How participants split this group's quotas: 'fair' (max-min fair share by reported "
                          "demand) or 'proportional' (Pulsar's: by current usage); null = the broker setting "
                          "defaultQuotaStrategy")


class MutationQuota(LenientModel):
    """KIP-599 controller mutation quota: burst = quotaPerSecond * samples * windowSeconds."""

    quotaPerSecond: LimitValue = Field(description="Mutations per second; -1 = unlimited")
    windowSeconds: Window = Field(1, description="Sample window in seconds (0 < w <= 3600)")
    samples: Samples = Field(11, description="Number of samples (1..1000)")
    strict: StrictBool = Field(True, description="true: reject when the bucket is negative; false: only throttle")


class MutationQuotaEntry(MutationQuota):
    user: str = Field(description="User, or '<default>'")
    clientId: str = Field(description="Client id, or '<default>'")


class LevelPolicies(LenientModel):
    publishRate: PublishRate | None = None
    dispatchRate: DispatchRate | None = None
    subscriptionDispatchRate: DispatchRate | None = None


class TenantPolicies(LenientModel):
    """Throttlescope extension: aggregate limits over everything of a tenant."""

    publishRate: PublishRate | None = None
    dispatchRate: DispatchRate | None = None


class SubscriptionPolicies(LenientModel):
    """A subscription's own policies (Pulsar's subscription-level dispatch rate, over the topic's and namespace's
    ``subscriptionDispatchRate``)."""

    dispatchRate: DispatchRate | None = None


class PolicySet(LenientModel):
    """Every policy at once, as one document a participant applies."""

    version: int = Field(description="Policy version of this document")
    resourceGroups: dict[str, ResourceGroup] = Field(default_factory=dict)
    tenantResourceGroups: dict[str, str] = Field(default_factory=dict, description="tenant -> resource group")
    namespaceResourceGroups: dict[str, str] = Field(default_factory=dict, description="'tenant/ns' -> resource group")
    topicResourceGroups: dict[str, str] = Field(
        default_factory=dict, description="'tenant/ns/topic' -> resource group (over its namespace's and tenant's)")
    tenants: dict[str, TenantPolicies] = Field(default_factory=dict, description="tenant -> aggregate limits")
    namespaces: dict[str, LevelPolicies] = Field(
        default_factory=dict, description="'tenant/ns' -> policies (defaults for each topic of the namespace)")
    topics: dict[str, LevelPolicies] = Field(default_factory=dict, description="'tenant/ns/topic' -> topic policies")
    subscriptions: dict[str, SubscriptionPolicies] = Field(
        default_factory=dict, description="'tenant/ns/topic/subscription' -> the subscription's own policies")
    brokerSettings: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="Every broker dynamic setting (defaults included)")
    mutationQuotas: list[MutationQuotaEntry] = Field(default_factory=list)

    def resource_group_of(self, topic: str) -> tuple[str, str] | None:
        """The resource group that applies to ``topic`` ('tenant/ns/topic') and what attaches it ('topic t/ns/x',
        'namespace t/ns' or 'tenant t'): the topic's, else its namespace's, else its tenant's; None: none."""
        by_level = {Level.TOPIC: self.topicResourceGroups, Level.NAMESPACE: self.namespaceResourceGroups,
                    Level.TENANT: self.tenantResourceGroups}
        found = resource_group_for(topic, lambda level, name: by_level[level].get(name))
        return None if found is None else (found[0], f"{found[1].value} {found[2]}")

    def rate_candidates(self, policy: str, topic: str, subscription: str | None = None
                        ) -> list[tuple[Level, PublishRate | DispatchRate | None]]:
        """The policies that may set a per-topic (``publishRate``, ``dispatchRate``) or per-subscription
        (``subscriptionDispatchRate``) limit of ``topic``, most specific first, None where unset: the
        subscription's own ``dispatchRate`` (for ``subscriptionDispatchRate`` with a ``subscription``), the
        topic's policy, the namespace's. Pulsar's precedence; the broker default comes after them."""
        _, namespace, topic = split_topic(topic)
        tp, np_ = self.topics.get(topic), self.namespaces.get(namespace)
        out: list[tuple[Level, PublishRate | DispatchRate | None]] = []
        if policy == "subscriptionDispatchRate" and subscription is not None:
            sp = self.subscriptions.get(f"{topic}/{subscription}")
            out.append((Level.SUBSCRIPTION, sp.dispatchRate if sp is not None else None))
        return out + [(Level.TOPIC, getattr(tp, policy, None) if tp is not None else None),
                      (Level.NAMESPACE, getattr(np_, policy, None) if np_ is not None else None)]

    def quota_strategy(self, group: str | None = None) -> str:
        """How a shared quota is split: resource group ``group``'s own ``quotaStrategy`` if set, else the broker
        setting ``defaultQuotaStrategy``, else 'fair'. An unknown word (a newer control plane) reads as 'fair'."""
        rg = self.resourceGroups.get(group) if group is not None else None
        for choice in (rg.quotaStrategy if rg is not None else None, self.brokerSettings.get("defaultQuotaStrategy")):
            if choice is not None:
                return choice if choice in QUOTA_STRATEGIES else "fair"
        return "fair"


def to_rate(value: PublishRate | DispatchRate | None) -> Rate | None:
    """The limiter's ``Rate`` for a Pulsar-shaped publish or dispatch rate (None stays None: not set)."""
    if value is None:
        return None
    if isinstance(value, PublishRate):
        return Rate(value.publishThrottlingRateInMsg, value.publishThrottlingRateInByte, value.ratePeriodInSecond)
    return Rate(value.dispatchThrottlingRateInMsg, value.dispatchThrottlingRateInByte, value.ratePeriodInSecond)
