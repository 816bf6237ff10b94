"""Request bodies of the admin API (strict: unknown fields rejected) and the path-name rules.

The policy objects are Pulsar's (PublishRate, DispatchRate, ResourceGroup field names) and live in
``metrics.report`` because participants parse them too; here they are subclassed with ``extra="forbid"``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from metrics.report import DispatchRate, MutationQuota, PublishRate, ResourceGroup, StrictModel

NAME_PATTERN = r"^[-=:.A-Za-z0-9_]{1,256}$"     # Pulsar's NamedEntity rule [-=:.\w]*, ASCII, non-empty, bounded
QUOTA_ID_PATTERN = r"^(<default>|[-=:.@+,A-Za-z0-9_]{1,256})$"
PRINCIPAL_PATTERN = r"^[-=:.@+A-Za-z0-9_]{1,256}$"  # a role name as Pulsar has them, e-mail addresses included
MAX_ADMIN_ROLES = 100


def _name(what: str) -> Any:
    return Path(pattern=NAME_PATTERN, description=f"{what} name: letters, digits, - = : . _ (1..256)")


Tenant = Annotated[str, _name("Tenant")]
Namespace = Annotated[str, _name("Namespace (local part)")]
Topic = Annotated[str, _name("Topic (local part)")]
GroupName = Annotated[str, _name("Resource group")]
QuotaUser = Annotated[str, Path(pattern=QUOTA_ID_PATTERN, description="Kafka user, or '<default>'")]
QuotaClient = Annotated[str, Path(pattern=QUOTA_ID_PATTERN, description="Kafka client id, or '<default>'")]
PrincipalName = Annotated[str, Path(pattern=PRINCIPAL_PATTERN,
                                    description="Principal name: letters, digits, - = : . @ + _ (1..256)")]
RoleName = Literal["super-user", "tenant-admin", "viewer", "participant", "proxy"]


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


class PrincipalBody(_Strict):
    model_config = ConfigDict(extra="forbid", title="NewPrincipal")

    role: RoleName = Field(description="super-user (everything), tenant-admin (the policies of the tenants whose "
                                       "adminRoles name it), viewer (reads), participant (reports and reads), "
                                       "proxy (reads; acts for the principal named in X-Original-Principal)")


class PrincipalView(BaseModel):
    name: str
    role: RoleName
    created: float = Field(description="Unix seconds")
    createdBy: str = Field(description="The principal that created it ('bootstrap' for admin and participant)")
    revoked: bool
    revokedAt: float | None = None
    adminOf: list[str] = Field(default_factory=list, description="Tenants whose adminRoles name it")


class CreatedPrincipal(BaseModel):
    name: str
    role: RoleName
    token: str = Field(description="The bearer token: shown only in this answer, stored only as a digest")


class TenantInfo(_Strict):
    model_config = ConfigDict(extra="forbid", title="TenantInfo")

    adminRoles: list[Annotated[str, StringConstraints(pattern=PRINCIPAL_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_ADMIN_ROLES,
        description="Principals (of role tenant-admin) that administer the tenant's namespace and topic policies")
    allowedClusters: list[Annotated[str, StringConstraints(pattern=NAME_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_ADMIN_ROLES,
        description="Kept for Pulsar's TenantInfo shape; throttlescope is one cluster and does not use it")


class WhoAmI(BaseModel):
    name: str
    role: RoleName
    adminOf: list[str] = Field(description="Tenants whose adminRoles name this principal (tenant admins)")
    via: str | None = Field(None, description="The proxy principal that acts for it, if any")


class Permission(BaseModel):
    allowed: bool
    needs: str = Field(description="What the call needs: open, reader, principal, participant, tenant-admin, "
                                   "super-user")
    reason: str | None = Field(None, description="Why not, when not allowed")
