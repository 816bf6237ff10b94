"""Request bodies of the admin API and the path-name rules.

The policy objects are Pulsar's (PublishRate, DispatchRate, ResourceGroup field names) and live in
``protocol.policies`` because participants parse them too; here they are subclassed as request bodies. As in
Pulsar (whose server and Java client read JSON with Jackson's ``FAIL_ON_UNKNOWN_PROPERTIES`` off), a body's
unknown fields are ignored -- a newer client's fields, such as Pulsar 3.x's ``replicationDispatchRateInMsgs`` on
a resource group, do not make a call fail -- and the answer names them in the ``X-Ignored-Fields`` header, so a
misspelt field is not silent. Known fields are validated strictly: a wrong value is refused with what is allowed.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, WithJsonSchema

from protocol import DispatchRate, LimitValue, MutationQuota, PublishRate, StrictModel

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
Subscription = Annotated[str, Path(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f/]+$",
                                   description="Subscription name (1..256 characters, no '/' or control character)")]
IsGlobal = Annotated[bool, Query(description="Pulsar: the global (geo-replicated) topic policy instead of the local "
                                             "one. Accepted and validated; throttlescope has one policy store, so "
                                             "both name the same policy")]
Applied = Annotated[bool, Query(description="true: the value that applies, whichever level set it (else the broker "
                                            "default); false: the value set at this level (204 when none)")]
TOPIC_DOMAINS = ("persistent", "non-persistent")   # one topic either way: the domain does not change the name


class _Strict(StrictModel):
    model_config = ConfigDict(extra="forbid")


class _Body(BaseModel):
    """A Pulsar-shaped request body: unknown fields are kept aside (``ignored``), never stored."""

    model_config = ConfigDict(extra="allow")

    def known(self, exclude_unset: bool = False) -> dict[str, Any]:
        """The body's known fields (only those sent, with ``exclude_unset``), as stored."""
        return self.model_dump(include=set(type(self).model_fields), exclude_unset=exclude_unset)

    def ignored(self) -> list[str]:
        return sorted(map(str, self.model_extra or {}))


class PublishRateBody(_Body, PublishRate):
    model_config = ConfigDict(extra="allow", title="PublishRate")


class DispatchRateBody(_Body, DispatchRate):
    model_config = ConfigDict(extra="allow", title="DispatchRate")

    relativeToPublishRate: Annotated[StrictBool, WithJsonSchema({
        "const": False, "description": "Must be false (or omitted): Pulsar's rate relative to the topic's publish "
                                       "rate is not supported, and true is refused with 400"})] = False


RG_FIELD = "; omitted or null: -1 (unlimited) when the group is created, unchanged when it is updated"


class ResourceGroupBody(_Body):
    """PIP-82 resource group, as Pulsar's ``ResourceGroup``: a PUT of an existing group changes only the fields
    sent (read-modify-write, as Pulsar's ``ResourceGroupsBase.internalUpdateResourceGroup``)."""

    model_config = ConfigDict(extra="allow", title="ResourceGroup")

    publishRateInMsgs: LimitValue | None = Field(None, description="Messages per second published, -1 = unlimited" + RG_FIELD)
    publishRateInBytes: LimitValue | None = Field(None, description="Bytes per second published, -1 = unlimited" + RG_FIELD)
    dispatchRateInMsgs: LimitValue | None = Field(None, description="Messages per second dispatched, -1 = unlimited"
                                             + RG_FIELD)
    dispatchRateInBytes: LimitValue | None = Field(None, description="Bytes per second dispatched, -1 = unlimited"
                                              + RG_FIELD)
    quotaStrategy: Literal["fair", "proportional"] | None = Field(
        None, description="How participants split this group's quotas: 'fair' (max-min fair share by reported "
                          "demand) or 'proportional' (Pulsar's: by current usage); null = the broker setting "
                          "defaultQuotaStrategy; omitted: unchanged (the broker setting, for a new group)")

    def merged(self, old: dict[str, Any] | None) -> dict[str, Any]:
        """The group to store: ``old`` (None: a new group, every rate -1) with the fields sent applied; a rate sent
        as null is left as it was (Pulsar's client never sends one), a quotaStrategy sent as null is cleared."""
        value = dict(old) if old is not None else {name: -1 for name in RG_RATES}
        for name, v in self.known(exclude_unset=True).items():
            if name in RG_RATES and v is not None:
                value[name] = v
            elif name == "quotaStrategy" and v is None:
                value.pop(name, None)
            elif name == "quotaStrategy":
                value[name] = v
        return value


RG_RATES = ("publishRateInMsgs", "publishRateInBytes", "dispatchRateInMsgs", "dispatchRateInBytes")


class MutationQuotaBody(_Body, MutationQuota):
    model_config = ConfigDict(extra="allow", title="MutationQuota")


class RateView(BaseModel):
    msgs: float = Field(description="Messages per period (<= 0: unlimited)")
    bytes: float = Field(description="Bytes per period (<= 0: unlimited)")
    periodSeconds: float
    unlimited: bool
    text: str = Field(description="Human-readable form")


class Resolved(BaseModel):
    rate: RateView
    source: str | None = Field(description="Level the value comes from (subscription, topic, namespace, broker), "
                                           "null: none set")
    relativeToPublishRate: bool = Field(False, description="What the policy says; relative dispatch rates are "
                                                           "refused (400), so true only for one stored before")


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
        description="Per-subscription dispatch: the subscription's own dispatchRate > topic policy > namespace "
                    "policy > broker default")
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
