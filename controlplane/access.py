"""Who may call what: the one authorization rule, by method and path, checked before any routing.

How and why
-----------
``need(method, path)`` says what a request needs; ``refusal(need, principal, is_admin_of)`` says why a principal
may not (None when it may). The guard middleware applies them to every request before routing, and the OpenAPI
document shows each operation's need as ``x-required-role``; so an endpoint added later is covered by the rule
the day it is added: a change under a tenant's namespaces or topics is a tenant admin's, anything else that
changes something is a super-user's, and every read is any principal's.

The rule follows Apache Pulsar's default authorization (``PulsarAuthorizationProvider``, ``AuthorizationService``
and the admin resources ``TenantsBase``, ``ResourceGroupsBase``, ``BrokersBase``, ``NamespacesBase``,
``PersistentTopicsBase``):

- a super-user may do everything (``isSuperUser``: ``superUserRoles``);
- namespace and topic policies (``validateNamespacePolicyOperation`` -> ``allowNamespacePolicyOperationAsync``,
  ``allowTopicPolicyOperationAsync``) need ``validateTenantAdminAccess`` of the path's tenant: a super-user, or a
  role named in that tenant's ``TenantInfo.adminRoles``. Here: ``/admin/v2/namespaces/{tenant}/...``,
  ``/admin/v2/persistent/{tenant}/...`` and ``/admin/v2/non-persistent/{tenant}/...``;
- resource groups (``ResourceGroupsBase``: ``validateSuperUserAccess`` on create, update, delete) and broker
  dynamic settings (``BrokersBase``: ``validateSuperUserAccess``) are super-user only;
- creating, updating and deleting a tenant is super-user only (``TenantsBase``: "This operation requires Pulsar
  super-user privileges").

Where Pulsar leaves a case open or its versions differ, the stricter rule is taken:

- attaching a resource group to a namespace or topic, or detaching it: Pulsar checks it as a namespace/topic
  policy (``PolicyName.RESOURCEGROUP``), so a tenant admin may. Here it is super-user only: a resource group is a
  quota the platform's operators share out, and a tenant admin who could detach its namespace would escape its
  quota, and one who could attach it to another tenant's group would eat that tenant's share;
- tenant aggregate limits (``/admin/v2/tenants/{tenant}/publishRate``, ``dispatchRate``) and tenant-level
  resource groups are ours, not Pulsar's; they cap a whole tenant as a resource group does, so they are
  super-user only too;
- updating and deleting a tenant: Pulsar 3.x and later also let the tenant's admins do it (``TenantOperation``
  through ``validateTenantAdminAccess``); here they stay super-user only, as Pulsar documents it, so a tenant admin
  cannot change who administers its tenant;
- mutation quotas (ours, after Kafka's KIP-599 quotas per user and client id, which Kafka's ``AlterClientQuotas``
  lets only a principal with ``ALTER_CONFIGS`` on the cluster change) are super-user only;
- principals are created, listed and revoked by super-users only;
- a tenant admin is a principal of role ``tenant-admin`` named in the tenant's ``adminRoles``; a viewer or
  participant named there stays what it is;
- reads: Pulsar lets only super-users list resource groups and tenants, and tenant admins read their policies.
  Here every principal reads everything (and anyone, with ``--open-reads``): participants are handed the whole
  policy document to enforce it, so hiding parts of it from the admin API would hide nothing.

Participants report and ask for tokens (``/v1/report``, ``/v1/goodbye``, ``/v1/grant``; super-users may too). ``/v1/whoami`` answers any principal
about itself, whether reads are open or not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from controlplane.principals import Principal

__all__ = ["Need", "need", "refusal", "OPEN_PATHS", "PARTICIPANT_PATHS", "SELF_PATHS", "READS"]

Kind = Literal["open", "reader", "principal", "participant", "tenant-admin", "super-user"]
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
PARTICIPANT_PATHS = frozenset({"/v1/report", "/v1/goodbye", "/v1/grant"})
SELF_PATHS = frozenset({"/v1/whoami", "/v1/whoami/can"})
READS = frozenset({"GET", "HEAD"})
TOPIC_DOMAINS = frozenset({"persistent", "non-persistent"})
SUPER_USER_ONLY = {  # the first segment after /admin/v2/ -> why
    "resourcegroups": "resource groups are super-user only (as in Pulsar)",
    "brokers": "broker settings are super-user only (as in Pulsar)",
    "quotas": "mutation quotas are super-user only",
    "tenants": "tenants, their admins and their aggregate limits are super-user only",
    "principals": "principals are managed by super-users only",
}
ATTACH = "attaching or detaching a resource group is super-user only: a tenant admin could otherwise escape its " \
         "quota or eat another tenant's share"


@dataclass(frozen=True)
class Need:
    kind: Kind
    tenant: str | None = None      # for kind "tenant-admin": the tenant the path is under
    why: str = ""                  # for kind "super-user": which rule it is


def need(method: str, path: str) -> Need:
    method = method.upper()
    if method in READS and path in OPEN_PATHS:
        return Need("open")
    if method in READS and path in SELF_PATHS:
        return Need("principal")
    if method == "POST" and path in PARTICIPANT_PATHS:
        return Need("participant")
    parts = path.split("/")[1:]    # "/admin/v2/namespaces/t/ns/x" -> ["admin", "v2", "namespaces", "t", "ns", "x"]
    if method in READS:
        if parts[:3] == ["admin", "v2", "principals"]:
            return Need("super-user", why=SUPER_USER_ONLY["principals"])
        return Need("reader")
    if parts[:2] == ["admin", "v2"] and len(parts) > 3 and parts[3]:
        scoped = {"namespaces": 5, **{d: 6 for d in TOPIC_DOMAINS}}.get(parts[2])
        if scoped is not None and len(parts) > scoped:
            if parts[scoped].lower() == "resourcegroup":
                return Need("super-user", why=ATTACH)
            return Need("tenant-admin", tenant=parts[3])
    section = parts[2] if parts[:2] == ["admin", "v2"] and len(parts) > 2 else ""
    return Need("super-user", why=SUPER_USER_ONLY.get(section, "only a super-user may change this"))


def refusal(n: Need, p: Principal | None, is_admin_of: Callable[[Principal, str], bool],
            method: str = "", path: str = "") -> str | None:
    """Why ``p`` (None: no principal) may not do what ``n`` needs, or None when it may."""
    what = f"{method} {path}".strip() or "this"
    if n.kind == "open":
        return None
    if p is None:
        return f"{what} needs a principal's token"
    if p.revoked is not None:
        return f"the token of {p.describe()} was revoked"
    if p.role == "super-user" or n.kind in ("reader", "principal"):
        return None
    if n.kind == "participant":
        return None if p.role == "participant" else \
            f"{p.describe()} may not {what}: only participants (and super-users) report"
    if n.kind == "tenant-admin" and n.tenant is not None:
        if is_admin_of(p, n.tenant):
            return None
        if p.role == "tenant-admin":
            return (f"{p.describe()} may not {what}: it is not named in the adminRoles of tenant {n.tenant!r}; a "
                    "tenant admin changes only its own tenants' namespace and topic policies")
        return f"{p.describe()} may not {what}: {_only(p)}"
    return f"{p.describe()} may not {what}: {n.why}"


def _only(p: Principal) -> str:
    return {"viewer": "a viewer only reads", "participant": "a participant only reports and reads",
            "proxy": "a proxy reads, and acts only for the principal it names in X-Original-Principal"}.get(
        p.role, "it needs a tenant admin of the tenant or a super-user")
