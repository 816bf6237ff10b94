"""The policy document participants apply, built from one store snapshot, and the effective limits of a topic.

Meaning of the levels (Pulsar's semantics kept):

- a *namespace* ``publishRate`` / ``dispatchRate`` / ``subscriptionDispatchRate`` is, as in Pulsar, the default
  for *each topic* (or subscription) of the namespace, not a total;
- a *topic* policy overrides it for that topic, and a *subscription*'s own ``dispatchRate`` (Pulsar's
  subscription-level dispatch rate) overrides the ``subscriptionDispatchRate`` for that subscription; with none
  of them, the broker default per topic/subscription applies (``maxPublishRatePerTopicIn*``,
  ``dispatchThrottlingRatePer{Topic,Subscription}In*``). ``PolicySet.rate_candidates`` is that order, and the
  participants resolve it the same way;
- totals over many topics come from the resource group that applies to a topic (PIP-82: the topic's own, else
  its namespace's, else its tenant's; ``PolicySet.resource_group_of``), and from the tenant aggregate limits
  (``/admin/v2/tenants/{t}/publishRate`` and ``dispatchRate``, a throttlescope extension);
- broker-level limits apply to each participant process on its own.
All that apply are enforced together (logical AND). ``applied`` answers Pulsar's ``?applied=true``: the value a
topic or subscription is held to, whichever level set it.
"""

from __future__ import annotations

import json

from controlplane import broker_settings
from controlplane.models import Aggregate, EffectiveLimits, RateView, Resolved
from controlplane.store import Reader
from limiter.policy import Level, Rate
from protocol import (
    BROKER_DEFAULTS,
    BROKER_TOTALS,
    DISPATCH,
    PUBLISH,
    DispatchRate,
    LevelPolicies,
    MutationQuotaEntry,
    PolicySet,
    PolicyView,
    PublishRate,
    ResourceGroup,
    SubscriptionPolicies,
    TenantPolicies,
    applicable,
    setting_rate,
)

RESOURCE_GROUP = "resourcegroup"
BROKER = "broker"
MUTATION_QUOTA = "mutationquota"
POLICIES = ("publishRate", "dispatchRate", "subscriptionDispatchRate")
TENANT_POLICIES = ("publishRate", "dispatchRate")
SUBSCRIPTION_RATE = "subscription.dispatchRate"   # a subscription's own dispatchRate, key 't/ns/topic/subscription'


def attach_kind(scope: str) -> str:
    return f"{scope}.resourcegroup"


def policy_kind(scope: str, policy: str) -> str:
    return f"{scope}.{policy}"


def quota_key(user: str, client_id: str) -> str:
    return json.dumps([user, client_id])


def _model(policy: str) -> type[PublishRate] | type[DispatchRate]:
    return PublishRate if policy == "publishRate" else DispatchRate


def build(r: Reader) -> PolicySet:
    data = r.all()
    ps = PolicySet(
        version=r.policy_version(),
        resourceGroups={k: ResourceGroup(**v) for k, v in data.get(RESOURCE_GROUP, {}).items()},
        tenantResourceGroups=dict(data.get(attach_kind("tenant"), {})),
        namespaceResourceGroups=dict(data.get(attach_kind("namespace"), {})),
        topicResourceGroups=dict(data.get(attach_kind("topic"), {})),
        brokerSettings=broker_settings.effective(data.get(BROKER, {})),
        mutationQuotas=[MutationQuotaEntry(user=u, clientId=c, **v)
                        for (u, c), v in ((json.loads(k), v) for k, v in data.get(MUTATION_QUOTA, {}).items())],
        subscriptions={k: SubscriptionPolicies(dispatchRate=DispatchRate(**v))
                       for k, v in data.get(SUBSCRIPTION_RATE, {}).items()},
    )
    for policy in TENANT_POLICIES:
        for tenant, value in data.get(policy_kind("tenant", policy), {}).items():
            ps.tenants.setdefault(tenant, TenantPolicies())
            setattr(ps.tenants[tenant], policy, _model(policy)(**value))
    for scope, target in (("namespace", ps.namespaces), ("topic", ps.topics)):
        for policy in POLICIES:
            for key, value in data.get(policy_kind(scope, policy), {}).items():
                target.setdefault(key, LevelPolicies())
                setattr(target[key], policy, _model(policy)(**value))
    return ps


def view(rate: Rate) -> RateView:
    return RateView(msgs=rate.msgs, bytes=rate.bytes, periodSeconds=rate.period_s, unlimited=rate.is_unlimited,
                    text=str(rate))


def broker_default(ps: PolicySet, policy: str) -> PublishRate | DispatchRate:
    """The broker default of a per-topic or per-subscription policy, in the policy's shape (0: none)."""
    msgs, byts = (ps.brokerSettings[name] for name in BROKER_DEFAULTS[policy])
    if policy == "publishRate":
        return PublishRate(publishThrottlingRateInMsg=msgs, publishThrottlingRateInByte=byts)
    return DispatchRate(dispatchThrottlingRateInMsg=msgs, dispatchThrottlingRateInByte=byts)


def applied(ps: PolicySet, policy: str, topic: str, subscription: str | None = None) -> PublishRate | DispatchRate:
    """Pulsar's ``applied=true``: the policy that holds it (``protocol.applicable``), else the broker default."""
    _, _, chosen = applicable(ps, policy, topic, subscription)
    return chosen if chosen is not None else broker_default(ps, policy)


def _resolved(ps: PolicySet, policy: str, topic: str, subscription: str | None) -> Resolved:
    rate, level, chosen = applicable(ps, policy, topic, subscription)
    return Resolved(rate=view(rate), source=None if level is None else level.value,
                    relativeToPublishRate=bool(getattr(chosen, "relativeToPublishRate", False)))


def effective_limits(ps: PolicySet, tenant: str, namespace: str, topic: str,
                     subscription: str | None) -> EffectiveLimits:
    topic_key = f"{tenant}/{namespace}/{topic}"
    s = ps.brokerSettings
    aggregates: list[Aggregate] = []
    rules = PolicyView(ps)
    found = ps.resource_group_of(topic_key)   # one resource group applies, as the participants bind producers
    if found is not None and found[0] in ps.resourceGroups:
        group, attached_to = found
        for direction in (PUBLISH, DISPATCH):
            aggregates.append(Aggregate(level=Level.RESOURCE_GROUP.value, name=group, direction=direction,
                                        attachedTo=attached_to, quotaStrategy=ps.quota_strategy(group),
                                        rate=view(rules.limit(Level.RESOURCE_GROUP, direction, group).rate)))
    for direction, policy in ((PUBLISH, "publishRate"), (DISPATCH, "dispatchRate")):
        limit = rules.limit(Level.TENANT, direction, tenant)
        if limit.source is not None:
            aggregates.append(Aggregate(level=Level.TENANT.value, name=tenant, direction=direction,
                                        attachedTo=f"tenant {tenant} aggregate {policy}", rate=view(limit.rate),
                                        quotaStrategy=ps.quota_strategy()))
    return EffectiveLimits(
        topic=topic_key, subscription=subscription, policyVersion=ps.version,
        publishRate=_resolved(ps, "publishRate", topic_key, None),
        dispatchRate=_resolved(ps, "dispatchRate", topic_key, None),
        subscriptionDispatchRate=_resolved(ps, "subscriptionDispatchRate", topic_key, subscription),
        aggregates=aggregates,
        broker={
            "publishRate": view(setting_rate(s, BROKER_TOTALS[PUBLISH])).model_dump(),
            "dispatchRate": view(setting_rate(s, BROKER_TOTALS[DISPATCH])).model_dump(),
            "offloadFlowPermitsPerSecond": s["managedLedgerOffloadBrokerFlowPermitsPerSecond"],
            **{k: s[k] for k in ("dispatchThrottlingOnBatchMessageEnabled", "preciseDispatcherFlowControl",
                                 "dispatchThrottlingOnNonBacklogConsumerEnabled")},
        },
    )
