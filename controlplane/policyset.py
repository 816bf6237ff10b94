"""The policy document participants apply, built from one store snapshot, and the effective limits of a topic.

Meaning of the levels (DESIGN §5, Pulsar's semantics kept):

- a *namespace* ``publishRate`` / ``dispatchRate`` / ``subscriptionDispatchRate`` is, as in Pulsar, the default
  for *each topic* (or subscription) of the namespace, not a total;
- a *topic* policy overrides it for that topic; with neither, the broker default per topic/subscription applies
  (``maxPublishRatePerTopicIn*``, ``dispatchThrottlingRatePer{Topic,Subscription}In*``);
- totals over many topics (the tenant and namespace aggregate levels) come from resource groups attached to the
  namespace or tenant (PIP-82), and from the tenant aggregate limits (``/admin/v2/tenants/{t}/publishRate`` and
  ``dispatchRate``, a throttlescope extension);
- broker-level limits apply to each participant process on its own.
All that apply are enforced together (logical AND).
"""

from __future__ import annotations

import json
from typing import Any

from controlplane import broker_settings
from controlplane.models import Aggregate, EffectiveLimits, RateView, Resolved
from controlplane.store import Reader
from limiter.policy import Level, Rate, resolve
from metrics.report import (
    DispatchRate,
    LevelPolicies,
    MutationQuotaEntry,
    PolicySet,
    PublishRate,
    ResourceGroup,
    TenantPolicies,
    to_rate,
)

RESOURCE_GROUP = "resourcegroup"
BROKER = "broker"
MUTATION_QUOTA = "mutationquota"
POLICIES = ("publishRate", "dispatchRate", "subscriptionDispatchRate")
TENANT_POLICIES = ("publishRate", "dispatchRate")


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
        brokerSettings=broker_settings.effective(data.get(BROKER, {})),
        mutationQuotas=[MutationQuotaEntry(user=u, clientId=c, **v)
                        for (u, c), v in ((json.loads(k), v) for k, v in data.get(MUTATION_QUOTA, {}).items())],
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


def _broker_rate(settings: dict[str, Any], msgs: str, byts: str) -> Rate:
    return Rate(settings[msgs], settings[byts], 1)


def _limited(rate: Rate) -> Rate | None:
    return None if rate.is_unlimited else rate


def _resolved(policy: str, topic: LevelPolicies | None, ns: LevelPolicies | None, default: Rate) -> Resolved:
    t = getattr(topic, policy, None) if topic else None
    n = getattr(ns, policy, None) if ns else None
    rate, level = resolve((Level.TOPIC, to_rate(t)), (Level.NAMESPACE, to_rate(n)), (Level.BROKER, _limited(default)))
    chosen = t if level == Level.TOPIC else n if level == Level.NAMESPACE else None
    return Resolved(rate=view(rate), source=None if level is None else level.value,
                    relativeToPublishRate=bool(getattr(chosen, "relativeToPublishRate", False)))


def effective_limits(ps: PolicySet, tenant: str, namespace: str, topic: str,
                     subscription: str | None) -> EffectiveLimits:
    ns_key, topic_key = f"{tenant}/{namespace}", f"{tenant}/{namespace}/{topic}"
    s = ps.brokerSettings
    tp, np_ = ps.topics.get(topic_key), ps.namespaces.get(ns_key)
    aggregates: list[Aggregate] = []
    # one resource group applies: the namespace's, else the tenant's (as limiter.levels binds producers)
    group, attached_to = ps.namespaceResourceGroups.get(ns_key), f"namespace {ns_key}"
    if group is None:
        group, attached_to = ps.tenantResourceGroups.get(tenant), f"tenant {tenant}"
    rg = ps.resourceGroups.get(group) if group else None
    if rg is not None:
        aggregates.append(Aggregate(level=Level.RESOURCE_GROUP.value, name=group, direction="publish",
                                    attachedTo=attached_to, quotaStrategy=ps.quota_strategy(group),
                                    rate=view(Rate(rg.publishRateInMsgs, rg.publishRateInBytes, 1))))
        aggregates.append(Aggregate(level=Level.RESOURCE_GROUP.value, name=group, direction="dispatch",
                                    attachedTo=attached_to, quotaStrategy=ps.quota_strategy(group),
                                    rate=view(Rate(rg.dispatchRateInMsgs, rg.dispatchRateInBytes, 1))))
    tenant_policies = ps.tenants.get(tenant)
    for direction, policy in (("publish", "publishRate"), ("dispatch", "dispatchRate")):
        value = getattr(tenant_policies, policy, None) if tenant_policies else None
        if value is not None:
            aggregates.append(Aggregate(level=Level.TENANT.value, name=tenant, direction=direction,
                                        attachedTo=f"tenant {tenant} aggregate {policy}", rate=view(to_rate(value)),
                                        quotaStrategy=ps.quota_strategy()))
    return EffectiveLimits(
        topic=topic_key, subscription=subscription, policyVersion=ps.version,
        publishRate=_resolved("publishRate", tp, np_, _broker_rate(
            s, "maxPublishRatePerTopicInMessages", "maxPublishRatePerTopicInBytes")),
        dispatchRate=_resolved("dispatchRate", tp, np_, _broker_rate(
            s, "dispatchThrottlingRatePerTopicInMsg", "dispatchThrottlingRatePerTopicInByte")),
        subscriptionDispatchRate=_resolved("subscriptionDispatchRate", tp, np_, _broker_rate(
            s, "dispatchThrottlingRatePerSubscriptionInMsg", "dispatchThrottlingRatePerSubscriptionInByte")),
        aggregates=aggregates,
        broker={
            "publishRate": view(_broker_rate(s, "brokerPublishThrottlingMaxMessageRate",
                                             "brokerPublishThrottlingMaxByteRate")).model_dump(),
            "dispatchRate": view(_broker_rate(s, "dispatchThrottlingRateInMsg",
                                              "dispatchThrottlingRateInByte")).model_dump(),
            "offloadFlowPermitsPerSecond": s["managedLedgerOffloadBrokerFlowPermitsPerSecond"],
            **{k: s[k] for k in ("dispatchThrottlingOnBatchMessageEnabled", "preciseDispatcherFlowControl",
                                 "dispatchThrottlingOnNonBacklogConsumerEnabled")},
        },
    )
