"""PIP-82 resource groups and their attachment to topics, namespaces and tenants (Pulsar's REST shapes).

What Pulsar's admin client expects, and gets here (``ResourceGroupsBase``, the namespace and topic
``resourcegroup`` endpoints):

- ``PUT /resourcegroups/{g}`` creates the group (-1 for every rate not sent) or, when it exists, changes only the
  fields sent: read-modify-write, so ``pulsar-admin resourcegroups update rg --msg-publish-rate 5000`` (which sends
  that one field) keeps the other three. A new group is answered 201 with the stored group (Pulsar: 204).
- Deleting a group still attached is refused with 412 (Pulsar's ``PreconditionFailedException``), naming what
  uses it; a group that does not exist is 404.
- Attaching a group that does not exist is 412. Detaching when none is attached succeeds (Pulsar sets the
  attachment to null either way), as a change: audited, a new policy version.
- Reading the group of a namespace, tenant or topic answers the bare name as text (Pulsar's client reads a raw
  String), or 204 with no body when none is attached (the client's null).
- Topic level (Pulsar 4.x): ``POST .../{topic}/resourceGroup`` with the bare name as the body (what Pulsar's
  client sends, labelled ``application/json``; any content type is taken); an empty body detaches (Pulsar's
  ``removeResourceGroup`` is that call). ``GET ...?applied=true`` answers the group that applies to the topic:
  its own, else its namespace's, else its tenant's. ``DELETE`` detaches too (an extension). ``persistent`` and
  ``non-persistent`` name the same topic; ``isGlobal`` is accepted (one policy store).

Tenant attachments are a throttlescope extension. A topic's own group wins over its namespace's, which wins over
its tenant's (``PolicySet.resource_group_of``): one group applies to a topic.
"""

import re
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import PlainTextResponse

from controlplane.context import Context, done, get_ctx
from controlplane.errors import NAME_RULE, ApiError, not_found
from controlplane.models import (
    NAME_PATTERN,
    TOPIC_DOMAINS,
    Applied,
    GroupName,
    IsGlobal,
    Namespace,
    ResourceGroupBody,
    Tenant,
    Topic,
)
from controlplane.policyset import RESOURCE_GROUP, attach_kind
from controlplane.store import Reader
from protocol import ResourceGroup

router = APIRouter(prefix="/admin/v2", tags=["resource groups"])
Ctx = Annotated[Context, Depends(get_ctx)]
CHANGED = {204: {"description": "Changed; the new policy version is in the X-Policy-Version header"}}
ATTACHED = {200: {"description": "The bare name of the attached group, as text"},
            204: {"description": "None attached (Pulsar's client reads null)"}}
ATTACH = {412: {"description": "No such resource group (Pulsar's PreconditionFailedException)"}, **CHANGED}
SCOPES = ("topic", "namespace", "tenant")


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


@router.put("/resourcegroups/{group}", summary="Create a resource group, or update the fields sent",
            status_code=204, responses={201: {"description": "Created", "model": ResourceGroup}, **CHANGED})
def put_group(group: GroupName, body: ResourceGroupBody, request: Request, ctx: Ctx) -> Response:
    change = ctx.update(request, RESOURCE_GROUP, group, lambda r, old: body.merged(old))
    return done(change, created=change.old is None, body=change.new, ignored=body.ignored())


def _users(r: Reader, group: str) -> list[str]:
    return [f"{scope} {target}" for scope in SCOPES
            for target, g in r.items(attach_kind(scope)).items() if g == group]


@router.delete("/resourcegroups/{group}", summary="Delete a resource group", status_code=204,
               responses={404: {"description": "No such resource group"},
                          412: {"description": "Still attached to a topic, namespace or tenant"}, **CHANGED})
def delete_group(group: GroupName, request: Request, ctx: Ctx) -> Response:
    def check(r: Reader, old: Any) -> None:
        if old is None:
            raise not_found(f"resource group {group!r} does not exist")
        users = _users(r, group)
        if users:
            raise ApiError(412, f"resource group {group!r} is still attached to {', '.join(users)}; detach it "
                                "first (DELETE .../resourcegroup of each), then delete the group")
    return done(ctx.change(request, RESOURCE_GROUP, group, None, check))


def _attach(scope: str, target: str, group: str | None, request: Request, ctx: Context) -> Response:
    """Attach ``group`` to ``target`` (None: detach, whether or not one is attached)."""
    def check(r: Reader, old: Any) -> None:
        if group is not None and r.get(RESOURCE_GROUP, group) is None:
            raise ApiError(412, f"resource group {group!r} does not exist; create it with PUT "
                                f"/admin/v2/resourcegroups/{group}, then attach it")
    return done(ctx.change(request, attach_kind(scope), target, group, check))


def _attached(scope: str, target: str, ctx: Context) -> Response:
    group = ctx.store.get(attach_kind(scope), target)
    return Response(status_code=204) if group is None else PlainTextResponse(group)


def _register(scope: str, prefix: str, target_of: Callable[..., str], tags: list[str]) -> None:
    """GET (bare name or 204), POST and PUT /{group} (attach), DELETE (detach) of ``{prefix}/resourcegroup``."""
    Target = Annotated[str, Depends(target_of)]
    path = f"{prefix}/resourcegroup"

    def get_attached(target: Target, ctx: Ctx) -> Response:
        return _attached(scope, target, ctx)

    def attach(target: Target, group: GroupName, request: Request, ctx: Ctx) -> Response:
        return _attach(scope, target, group, request, ctx)

    def detach(target: Target, request: Request, ctx: Ctx) -> Response:
        return _attach(scope, target, None, request, ctx)

    for fn, verb in ((get_attached, "get"), (attach, "attach"), (detach, "detach")):
        fn.__name__ = f"{verb}_{scope}_group"
    router.get(path, response_class=PlainTextResponse, responses=ATTACHED, tags=tags,
               summary=f"Get the resource group attached to a {scope} (its bare name)")(get_attached)
    router.post(f"{path}/{{group}}", status_code=204, responses=ATTACH, tags=tags,
                summary=f"Attach a resource group to a {scope} (replaces any attached one)")(attach)
    router.put(f"{path}/{{group}}", status_code=204, responses=ATTACH, tags=tags,
               summary=f"Attach a resource group to a {scope} (same as POST)")(attach)
    router.delete(path, status_code=204, tags=tags, responses=CHANGED,
                  summary=f"Detach the resource group of a {scope} (succeeds when none is attached)")(detach)


def _namespace(tenant: Tenant, namespace: Namespace) -> str:
    return f"{tenant}/{namespace}"


def _tenant(tenant: Tenant) -> str:
    return tenant


def _topic(tenant: Tenant, namespace: Namespace, topic: Topic) -> str:
    return f"{tenant}/{namespace}/{topic}"


_register("namespace", "/namespaces/{tenant}/{namespace}", _namespace, ["namespaces"])
_register("tenant", "/tenants/{tenant}", _tenant, ["tenants"])


NAME = re.compile(NAME_PATTERN)
TOPIC_BODY = {"requestBody": {"required": False, "description": "The resource group's bare name; empty: detach",
                              "content": {"text/plain": {"schema": {
                                  "type": "string", "pattern": NAME_PATTERN.replace("{1,256}$", "{0,256}$")}}}}}


async def _group_in_body(request: Request) -> str | None:
    """The topic-level POST's body: a bare group name, or nothing (detach). Async: reading a body awaits."""
    raw = await request.body()
    try:
        text: str | None = raw.decode()
    except UnicodeDecodeError:
        text = None
    if text == "":
        return None
    if text is None or not NAME.match(text):
        shown = repr(text[:60]) if text is not None else "bytes that are not UTF-8"
        hint = " (without JSON quotes)" if text is not None and text.startswith('"') else ""
        raise ApiError(422, f"the body must be a resource group's bare name{hint}, as Pulsar's client sends it, or "
                            f"empty to detach; {NAME_RULE}; got {shown}")
    return text


TopicTarget = Annotated[str, Depends(_topic)]
BodyGroup = Annotated[str | None, Depends(_group_in_body)]


def _register_topic(domain: str) -> None:
    """Pulsar 4.x's topic-level resource group under ``/{domain}/...`` (both domains name the same topic)."""
    path = f"/{domain}/{{tenant}}/{{namespace}}/{{topic}}/resourceGroup"

    def get_topic_group(target: TopicTarget, ctx: Ctx, applied: Applied = False,
                        isGlobal: IsGlobal = False) -> Response:
        if not applied:
            return _attached("topic", target, ctx)
        found = ctx.policies().resource_group_of(target)
        return Response(status_code=204) if found is None else PlainTextResponse(found[0])

    def set_topic_group(target: TopicTarget, group: BodyGroup, request: Request, ctx: Ctx,
                        isGlobal: IsGlobal = False) -> Response:
        return _attach("topic", target, group, request, ctx)

    def detach_topic_group(target: TopicTarget, request: Request, ctx: Ctx, isGlobal: IsGlobal = False) -> Response:
        return _attach("topic", target, None, request, ctx)

    for fn in (get_topic_group, set_topic_group, detach_topic_group):
        fn.__name__ = f"{fn.__name__}_{domain.replace('-', '_')}"
    router.get(path, response_class=PlainTextResponse, responses=ATTACHED, tags=["topics"],
               summary="Get the resource group of a topic (its bare name); applied=true: the one that applies"
               )(get_topic_group)
    router.post(path, status_code=204, responses=ATTACH, tags=["topics"], openapi_extra=TOPIC_BODY,
                summary="Attach a resource group to a topic (its bare name as the body); an empty body detaches"
                )(set_topic_group)
    router.delete(path, status_code=204, responses=CHANGED, tags=["topics"],
                  summary="Detach the resource group of a topic (succeeds when none is attached; an extension)"
                  )(detach_topic_group)


for _domain in TOPIC_DOMAINS:
    _register_topic(_domain)
