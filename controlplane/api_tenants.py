"""Tenants and their admins, in Pulsar's shape (``/admin/v2/tenants/{tenant}`` with ``TenantInfo``).

A tenant's ``adminRoles`` name the principals (of role ``tenant-admin``) that change its namespace and topic
policies (``access.py``). As in Pulsar's ``TenantsBase``: ``PUT`` creates (409 when it exists), ``POST`` replaces
the TenantInfo of an existing tenant (404 when missing), ``DELETE`` removes it; each answers 204. Unlike Pulsar
there is no namespace registry: policies may name a tenant that has no TenantInfo (then only super-users change
them), and deleting a tenant's TenantInfo leaves its policies in place.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from controlplane.context import Context, done, get_ctx
from controlplane.errors import ApiError, not_found
from controlplane.models import Tenant, TenantInfo
from controlplane.principals import TENANT
from controlplane.store import Reader

router = APIRouter(prefix="/admin/v2/tenants", tags=["tenants"])
Ctx = Annotated[Context, Depends(get_ctx)]
CHANGED = {204: {"description": "Changed; the new policy version is in the X-Policy-Version header"}}
ADMIN_ROLES = ("tenant-admin", "super-user")


def _value(body: TenantInfo, ctx: Context) -> dict[str, Any]:
    """The stored TenantInfo (names sorted, without repeats); 412 when it names a principal that cannot be one."""
    wrong = [f"{p.name!r} ({p.role})" for name in sorted(set(body.adminRoles))
             if (p := ctx.directory.get(name)) is not None and p.role not in ADMIN_ROLES]
    if wrong:
        raise ApiError(412, f"adminRoles may name tenant-admin principals (or super-users), not {', '.join(wrong)}; "
                            "create a tenant admin with: python -m controlplane principals create NAME --role "
                            "tenant-admin")
    return {"adminRoles": sorted(set(body.adminRoles)), "allowedClusters": sorted(set(body.allowedClusters))}


@router.get("", response_model=list[str], summary="List the tenants that have a TenantInfo")
def list_tenants(ctx: Ctx) -> list[str]:
    return sorted(ctx.store.items(TENANT))


def _missing(tenant: str) -> str:
    return f"tenant {tenant!r} does not exist; create it with PUT /admin/v2/tenants/{tenant}"


def _write(tenant: str, value: Any, exists: bool, request: Request, ctx: Context) -> Response:
    """Store (``value`` None: delete) a tenant's TenantInfo; 404 when it must exist and does not, 409 the reverse."""
    def check(r: Reader, old: Any) -> None:
        if exists and old is None:
            raise not_found(_missing(tenant))
        if not exists and old is not None:
            raise ApiError(409, f"tenant {tenant!r} already exists; change its admins with POST "
                                f"/admin/v2/tenants/{tenant}")
    return done(ctx.change(request, TENANT, tenant, value, check))


@router.get("/{tenant}", response_model=TenantInfo, summary="Get a tenant's TenantInfo (its admins)",
            responses={404: {"description": "No such tenant"}})
def get_tenant(tenant: Tenant, ctx: Ctx) -> Any:
    value = ctx.store.get(TENANT, tenant)
    if value is None:
        raise not_found(_missing(tenant))
    return value


@router.put("/{tenant}", status_code=204, summary="Create a tenant",
            responses={409: {"description": "The tenant exists"},
                       412: {"description": "adminRoles names a principal that is not a tenant admin"}, **CHANGED})
def create_tenant(tenant: Tenant, body: TenantInfo, request: Request, ctx: Ctx) -> Response:
    return _write(tenant, _value(body, ctx), False, request, ctx)


@router.post("/{tenant}", status_code=204, summary="Replace a tenant's TenantInfo (its admins)",
             responses={404: {"description": "No such tenant"},
                        412: {"description": "adminRoles names a principal that is not a tenant admin"}, **CHANGED})
def update_tenant(tenant: Tenant, body: TenantInfo, request: Request, ctx: Ctx) -> Response:
    return _write(tenant, _value(body, ctx), True, request, ctx)


@router.delete("/{tenant}", status_code=204, summary="Delete a tenant's TenantInfo (its policies stay)",
               responses={404: {"description": "No such tenant"}, **CHANGED})
def delete_tenant(tenant: Tenant, request: Request, ctx: Ctx) -> Response:
    return _write(tenant, None, True, request, ctx)
