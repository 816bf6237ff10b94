"""PIP-82 resource groups and their attachment to namespaces and tenants (Pulsar's REST shapes)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

from controlplane.context import Context, done, get_ctx
from controlplane.errors import ApiError, not_found
from controlplane.models import GroupName, Namespace, ResourceGroupBody, Tenant
from controlplane.policyset import RESOURCE_GROUP, attach_kind
from controlplane.store import Reader
from metrics.report import ResourceGroup

router = APIRouter(prefix="/admin/v2", tags=["resource groups"])
Ctx = Annotated[Context, Depends(get_ctx)]
CHANGED = {204: {"description": "Changed; the new policy version is in the X-Policy-Version header"}}


@router.get("/resourcegroups", summary="List resource groups", response_model=list[str])
def list_groups(ctx: Ctx) -> list[str]:
    return sorted(ctx.store.items(RESOURCE_GROUP))


@router.get("/resourcegroups/{group}", summary="Get a resource group", response_model=ResourceGroup,
            response_model_exclude_none=True,
            responses={404: {"description": "No such resource group"}})
def get_group(group: GroupName, ctx: Ctx) -> Any:
    value = ctx.store.get(RESOURCE_GROUP, group)
    if value is None:
        raise not_found(f"resource group {group!r} does not exist")
    return value


@router.put("/resourcegroups/{group}", summary="Create or update a resource group", status_code=204,
            responses={201: {"description": "Created", "model": ResourceGroup}, **CHANGED})
def put_group(group: GroupName, body: ResourceGroupBody, request: Request, ctx: Ctx) -> Response:
    value = body.model_dump(exclude_none=True)  # quotaStrategy only when set (null: the broker default)
    change = ctx.change(request, RESOURCE_GROUP, group, value)
    return done(change, created=change.old is None, body=value)


def _users(r: Reader, group: str) -> list[str]:
    return [f"{scope} {target}" for scope in ("tenant", "namespace")
            for target, g in r.items(attach_kind(scope)).items() if g == group]


@router.delete("/resourcegroups/{group}", summary="Delete a resource group", status_code=204,
               responses={404: {"description": "No such resource group"},
                          409: {"description": "Still attached to a namespace or tenant"}, **CHANGED})
def delete_group(group: GroupName, request: Request, ctx: Ctx) -> Response:
    def check(r: Reader, old: Any) -> None:
        if old is None:
            raise not_found(f"resource group {group!r} does not exist")
        users = _users(r, group)
        if users:
            raise ApiError(409, f"resource group {group!r} is still attached to {', '.join(users)}; detach it first")
    return done(ctx.change(request, RESOURCE_GROUP, group, None, check))


def _attach(scope: str, target: str, group: str, request: Request, ctx: Context) -> Response:
    def check(r: Reader, old: Any) -> None:
        if r.get(RESOURCE_GROUP, group) is None:
            raise not_found(f"resource group {group!r} does not exist; create it with PUT /admin/v2/resourcegroups/"
                            f"{group}")
    return done(ctx.change(request, attach_kind(scope), target, group, check))


def _detach(scope: str, target: str, request: Request, ctx: Context) -> Response:
    def check(r: Reader, old: Any) -> None:
        if old is None:
            raise not_found(f"{scope} {target!r} has no resource group attached")
    return done(ctx.change(request, attach_kind(scope), target, None, check))


def _get(scope: str, target: str, ctx: Context) -> str:
    group = ctx.store.get(attach_kind(scope), target)
    if group is None:
        raise not_found(f"{scope} {target!r} has no resource group attached")
    return group


ATTACH = {404: {"description": "No such resource group"}, **CHANGED}


NONE_ATTACHED = {404: {"description": "None attached"}}


@router.get("/namespaces/{tenant}/{namespace}/resourcegroup", response_model=str, responses=NONE_ATTACHED,
            summary="Get the resource group attached to a namespace", tags=["namespaces"])
def get_ns_group(tenant: Tenant, namespace: Namespace, ctx: Ctx) -> str:
    return _get("namespace", f"{tenant}/{namespace}", ctx)


@router.post("/namespaces/{tenant}/{namespace}/resourcegroup/{group}", status_code=204, responses=ATTACH,
             tags=["namespaces"], summary="Attach a resource group to a namespace (replaces any attached one)")
@router.put("/namespaces/{tenant}/{namespace}/resourcegroup/{group}", status_code=204, responses=ATTACH,
            tags=["namespaces"], summary="Attach a resource group to a namespace (same as POST)")
def attach_ns_group(tenant: Tenant, namespace: Namespace, group: GroupName, request: Request, ctx: Ctx) -> Response:
    return _attach("namespace", f"{tenant}/{namespace}", group, request, ctx)


@router.delete("/namespaces/{tenant}/{namespace}/resourcegroup", status_code=204, tags=["namespaces"],
               summary="Detach the resource group of a namespace",
               responses={404: {"description": "None attached"}, **CHANGED})
def detach_ns_group(tenant: Tenant, namespace: Namespace, request: Request, ctx: Ctx) -> Response:
    return _detach("namespace", f"{tenant}/{namespace}", request, ctx)


@router.get("/tenants/{tenant}/resourcegroup", response_model=str, tags=["tenants"], responses=NONE_ATTACHED,
            summary="Get the resource group attached to a tenant")
def get_tenant_group(tenant: Tenant, ctx: Ctx) -> str:
    return _get("tenant", tenant, ctx)


@router.post("/tenants/{tenant}/resourcegroup/{group}", status_code=204, responses=ATTACH, tags=["tenants"],
             summary="Attach a resource group to a tenant (replaces any attached one)")
@router.put("/tenants/{tenant}/resourcegroup/{group}", status_code=204, responses=ATTACH, tags=["tenants"],
            summary="Attach a resource group to a tenant (same as POST)")
def attach_tenant_group(tenant: Tenant, group: GroupName, request: Request, ctx: Ctx) -> Response:
    return _attach("tenant", tenant, group, request, ctx)


@router.delete("/tenants/{tenant}/resourcegroup", status_code=204, tags=["tenants"],
               summary="Detach the resource group of a tenant",
               responses={404: {"description": "None attached"}, **CHANGED})
def detach_tenant_group(tenant: Tenant, request: Request, ctx: Ctx) -> Response:
    return _detach("tenant", tenant, request, ctx)
