"""Request bodies of the admin API (strict: unknown fields rejected) and the path-name rules.

The policy objects are Pulsar's (PublishRate, DispatchRate, ResourceGroup field names) and live in
``metrics.report`` because participants parse them too; here they are subclassed with ``extra="forbid"``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from metrics.report import DispatchRate, MutationQuota, PublishRate, ResourceGroup, StrictModel

NAME_PATTERN = r"^[-=:.A-Za-z0-9_]{1,256}$"     # Pulsar's NamedEntity rule [-=:.\w]*, ASCII, non-empty, bounded
QUOTA_ID_PATTERN = r"^(<default>|[-=:.@+,A-Za-z0-9_]{1,256})$"


def _name(what: str) -> Any:
    return Path(pattern=NAME_PATTERN, description=f"{what} name: letters, digits, - = : . _ (1..256)")


Tenant = Annotated[str, _name("Tenant")]
Namespace = Annotated[str, _name("Namespace (local part)")]
Topic = Annotated[str, _name("Topic (local part)")]
GroupName = Annotated[str, _name("Resource group")]
QuotaUser = Annotated[str, Path(pattern=QUOTA_ID_PATTERN, description="Kafka user, or '<default>'")]
QuotaClient = Annotated[str, Path(pattern=QUOTA_ID_PATTERN, description="Kafka client id, or '<default>'")]


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid")


class PublishRateBody(PublishRate, _Strict):
    model_config = ConfigDict(extra="forbid", title="PublishRate")


class DispatchRateBody(DispatchRate, _Strict):
    model_config = ConfigDict(extra="forbid", title="DispatchRate")


class ResourceGroupBody(ResourceGroup, _Strict):
    model_config = ConfigDict(extra="forbid", title="ResourceGroup")

    quotaStrategy: Literal["fair", "proportional"] | None = Field(
        None, description="How participants split this group's quotas: 'fair' (max-min fair share by reported "
                          "demand) or 'proportional' (Pulsar's: by current usage); omitted or null = the broker "
                          "setting defaultQuotaStrategy")


class MutationQuotaBody(MutationQuota, _Strict):
    model_config = ConfigDict(extra="forbid", title="MutationQuota")


class RateView(BaseModel):
    msgs: float = Field(description="Messages per period (<= 0: unlimited)")
    bytes: float = Field(description="Bytes per period (<= 0: unlimited)")
    periodSeconds: float
    unlimited: bool
    text: str = Field(description="Human-readable form")


class Resolved(BaseModel):
    rate: RateView
    source: str | None = Field(description="Level the value comes from (topic, namespace, broker), null: none set")
    relativeToPublishRate: bool = False


class Aggregate(BaseModel):
    level: str = Field(description="resource_group or tenant")
    name: str
    direction: str = Field(description="publish or dispatch")
    attachedTo: str = Field(description="What brings this limit here, e.g. 'namespace acme/orders'")
    rate: RateView
    quotaStrategy: str = Field("fair", description="How participants split it: fair or proportional")


class EffectiveLimits(BaseModel):
    topic: str
    subscription: str | None
    policyVersion: int
    publishRate: Resolved = Field(description="Per-topic publish: topic policy > namespace policy > broker default")
    dispatchRate: Resolved = Field(description="Per-topic dispatch: topic policy > namespace policy > broker default")
    subscriptionDispatchRate: Resolved = Field(
        description="Per-subscription dispatch: topic policy > namespace policy > broker default")
    aggregates: list[Aggregate] = Field(description="Shared limits over many topics (resource groups, tenant)")
    broker: dict[str, Any] = Field(description="Broker-level (per process) limits and flags")


class AuditEntry(BaseModel):
    id: int
    time: float = Field(description="Unix seconds")
    actor: str
    method: str
    endpoint: str
    oldValue: Any = None
    newValue: Any = None
    policyVersion: int


class AuditPage(BaseModel):
    total: int
    entries: list[AuditEntry]
