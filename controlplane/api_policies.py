"""Rate policies at the tenant, namespace and topic levels, and the effective limits of a topic.

Namespace and topic policies keep Pulsar's paths and meaning (``publishRate``, ``dispatchRate``,
``subscriptionDispatchRate``; a namespace's value is the default for each of its topics). The tenant ``publishRate``
and ``dispatchRate`` are a throttlescope extension: aggregate limits over everything of the tenant.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from controlplane import policyset
from controlplane.context import Context, done, get_ctx
from controlplane.errors import not_found
from controlplane.models import DispatchRateBody, EffectiveLimits, Namespace, PublishRateBody, Tenant, Topic
from controlplane.store import Reader
from metrics.report import DispatchRate, PublishRate

router = APIRouter(prefix="/admin/v2")
Ctx = Annotated[Context, Depends(get_ctx)]
CHANGED = {204: {"description": "Changed; the new policy version is in the X-Policy-Version header"}}
MEANING = {
    ("tenant", "publishRate"): "aggregate publish limit over every topic of the tenant (throttlescope extension)",
    ("tenant", "dispatchRate"): "aggregate dispatch limit over every topic of the tenant (throttlescope extension)",
    ("namespace", "publishRate"): "publish limit applied to each topic of the namespace (Pulsar's meaning)",
    ("namespace", "dispatchRate"): "dispatch limit applied to each topic of the namespace",
    ("namespace", "subscriptionDispatchRate"): "dispatch limit applied to each subscription in the namespace",
    ("topic", "publishRate"): "publish limit of this topic (overrides the namespace's)",
    ("topic", "dispatchRate"): "dispatch limit of this topic (overrides the namespace's)",
    ("topic", "subscriptionDispatchRate"): "dispatch limit of each subscription of this topic",
}


def _tenant_target(tenant: Tenant) -> str:
    return tenant


def _namespace_target(tenant: Tenant, namespace: Namespace) -> str:
    return f"{tenant}/{namespace}"


def _topic_target(tenant: Tenant, namespace: Namespace, topic: Topic) -> str:
    return f"{tenant}/{namespace}/{topic}"


SCOPES: dict[str, tuple[str, Callable[..., str], tuple[str, ...]]] = {
    "tenant": ("/tenants/{tenant}", _tenant_target, policyset.TENANT_POLICIES),
    "namespace": ("/namespaces/{tenant}/{namespace}", _namespace_target, policyset.POLICIES),
    "topic": ("/persistent/{tenant}/{namespace}/{topic}", _topic_target, policyset.POLICIES),
}


def _register(scope: str, policy: str) -> None:
    prefix, target_of, _ = SCOPES[scope]
    kind = policyset.policy_kind(scope, policy)
    out_model = PublishRate if policy == "publishRate" else DispatchRate
    body_model = PublishRateBody if policy == "publishRate" else DispatchRateBody
    Target = Annotated[str, Depends(target_of)]
    meaning = MEANING[(scope, policy)]
    path = f"{prefix}/{policy}"
    tags = [f"{scope}s"]

    def get_policy(target: Target, ctx: Ctx) -> Any:
        value = ctx.store.get(kind, target)
        if value is None:
            raise not_found(f"{scope} {target!r} has no {policy} set")
        return value

    def set_policy(target: Target, body: body_model, request: Request, ctx: Ctx) -> Response:  # type: ignore[valid-type]
        return done(ctx.change(request, kind, target, body.model_dump()))

    def remove_policy(target: Target, request: Request, ctx: Ctx) -> Response:
        def check(r: Reader, old: Any) -> None:
            if old is None:
                raise not_found(f"{scope} {target!r} has no {policy} set")
        return done(ctx.change(request, kind, target, None, check))

    for fn, verb in ((get_policy, "get"), (set_policy, "set"), (remove_policy, "remove")):
        fn.__name__ = f"{verb}_{scope}_{policy}"
    router.get(path, response_model=out_model, tags=tags, summary=f"Get the {scope} {policy}",
               description=meaning, responses={404: {"description": "Not set"}})(get_policy)
    for method in (router.post, router.put):
        method(path, status_code=204, tags=tags, summary=f"Set the {scope} {policy}", description=meaning,
               responses=CHANGED)(set_policy)
    router.delete(path, status_code=204, tags=tags, summary=f"Remove the {scope} {policy}", description=meaning,
                  responses={404: {"description": "Not set"}, **CHANGED})(remove_policy)


for _scope, (_, _, _policies) in SCOPES.items():
    for _policy in _policies:
        _register(_scope, _policy)

Subscription = Annotated[str | None, Query(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f/]+$",
                                           description="A subscription of the topic")]


@router.get("/persistent/{tenant}/{namespace}/{topic}/effectiveLimits", response_model=EffectiveLimits,
            tags=["topics"], summary="The limits that apply to a topic (or subscription), and where each comes from",
            description="Per-topic and per-subscription limits resolve topic policy > namespace policy > broker "
                        "default; aggregates (resource group of the namespace, else of the tenant; tenant "
                        "aggregate limits) and broker-level limits apply on top (logical AND).")
def effective_limits(tenant: Tenant, namespace: Namespace, topic: Topic, ctx: Ctx,
                     subscription: Subscription = None) -> EffectiveLimits:
    return policyset.effective_limits(ctx.policies(), tenant, namespace, topic, subscription)
