"""Principals (created, listed, revoked by super-users) and ``/v1/whoami`` (any principal, about itself).

Pulsar has no REST resource for this (its tokens are made offline with ``pulsar tokens create --subject``); the
shape follows the other admin resources: ``PUT`` creates, ``DELETE`` revokes, ``GET`` lists. The token is in the
creation's answer only. ``/v1/whoami/can`` answers whether the caller may make a given call, with the guard's own
rule (``access.py``) and reason, so the dashboard shows an editor read-only for exactly the calls the control
plane would refuse, without a second copy of the rule.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from controlplane import access
from controlplane.context import Context, audit_of, done, get_ctx
from controlplane.errors import not_found
from controlplane.middleware import principal_of
from controlplane.models import (
    CreatedPrincipal,
    Permission,
    PrincipalBody,
    PrincipalName,
    PrincipalView,
    WhoAmI,
)
from controlplane.principals import Principal

router = APIRouter()
Ctx = Annotated[Context, Depends(get_ctx)]
CHANGED = {204: {"description": "Revoked; the new policy version is in the X-Policy-Version header"}}
HOW = "python -m controlplane principals create NAME --role ROLE [--tenant TENANT] (or PUT /admin/v2/principals/NAME)"


def _view(ctx: Context, p: Principal) -> dict[str, Any]:
    return {**p.public(), "adminOf": ctx.directory.tenants_of(p.name) if p.role == "tenant-admin" else []}


@router.get("/admin/v2/principals", response_model=list[PrincipalView], tags=["principals"],
            summary="List principals (revoked ones too), with the tenants each administers")
def list_principals(ctx: Ctx) -> list[dict[str, Any]]:
    return [_view(ctx, p) for p in ctx.directory.all()]


@router.get("/admin/v2/principals/{name}", response_model=PrincipalView, tags=["principals"],
            summary="Get a principal", responses={404: {"description": "No such principal"}})
def get_principal(name: PrincipalName, ctx: Ctx) -> dict[str, Any]:
    p = ctx.directory.get(name)
    if p is None:
        raise not_found(f"no principal named {name!r}; create one with: {HOW}")
    return _view(ctx, p)


@router.put("/admin/v2/principals/{name}", status_code=201, response_model=CreatedPrincipal, tags=["principals"],
            summary="Create a principal; the answer holds its token, shown this once",
            description="A tenant admin administers the tenants whose adminRoles name it: add it with "
                        "POST /admin/v2/tenants/{tenant} (or create the tenant with PUT).",
            responses={409: {"description": "The name exists (revoked names are not reused)"}})
def create_principal(name: PrincipalName, body: PrincipalBody, request: Request, ctx: Ctx) -> Response:
    creator = principal_of(request)
    change, token = ctx.directory.create(name, body.role, audit_of(request),
                                         creator.name if creator is not None else "anonymous")
    return done(change, created=True, body={"name": name, "role": body.role, "token": token})


@router.delete("/admin/v2/principals/{name}", status_code=204, tags=["principals"],
               summary="Revoke a principal: its token is refused from the next request on",
               responses={404: {"description": "No such principal"},
                          409: {"description": "Already revoked, or the last active super-user"}, **CHANGED})
def revoke_principal(name: PrincipalName, request: Request, ctx: Ctx) -> Response:
    return done(ctx.directory.revoke(name, audit_of(request)))


@router.get("/v1/whoami", response_model=WhoAmI, tags=["principals"],
            summary="The principal the token names (needs a token even when reads are open)")
def whoami(request: Request, ctx: Ctx) -> dict[str, Any]:
    p = principal_of(request)
    assert p is not None  # the guard let only a principal through
    return {"name": p.name, "role": p.role, "via": request.state.via,
            "adminOf": ctx.directory.tenants_of(p.name) if p.role == "tenant-admin" else []}


@router.get("/v1/whoami/can", response_model=Permission, tags=["principals"],
            summary="Whether the caller may make a call, and why not (the guard's own rule)")
def can(request: Request, ctx: Ctx,
        method: Annotated[str, Query(pattern="^(GET|HEAD|POST|PUT|DELETE|PATCH)$")],
        path: Annotated[str, Query(min_length=1, max_length=2048, pattern="^/[^\x00-\x1f\x7f]*$")]) -> Permission:
    need = access.need(method, path)
    if need.kind == "reader" and ctx.settings.open_reads:
        return Permission(allowed=True, needs=need.kind)
    reason = access.refusal(need, principal_of(request), ctx.directory.is_admin_of, method, path)
    return Permission(allowed=reason is None, needs=need.kind, reason=reason)
