"""Rate policies at the tenant, namespace, topic and subscription levels, and the effective limits of a topic.

Namespace, topic and subscription policies keep Pulsar's paths and meaning (``publishRate``, ``dispatchRate``,
``subscriptionDispatchRate``, and a subscription's own ``dispatchRate``; a namespace's value is the default for
each of its topics). The tenant ``publishRate`` and ``dispatchRate`` are a throttlescope extension: aggregate
limits over everything of the tenant.

Answered as Pulsar's admin client reads them (``NamespacesImpl``, ``TopicPoliciesImpl``):

- a GET of a policy that is not set answers 204 with no body (the client's null); a DELETE of one succeeds (a
  change all the same: audited, a new policy version);
- topic and subscription GETs take ``applied``: true answers the value that applies (subscription's own > topic's
  > namespace's > broker default, as the participants resolve it), false the value set at that level;
- topic and subscription calls take ``isGlobal`` (one policy store here, so it names the same policy), and
  ``persistent`` and ``non-persistent`` paths name the same topic (participants know a topic by its name);
- unknown body fields are ignored and named in ``X-Ignored-Fields``;
- ``relativeToPublishRate: true`` is refused with 400: Pulsar's relative rate (the topic's current publish rate
  plus the configured one) needs every topic's aggregate publish rate where it is read, which participants do not
  have; a rate that is accepted is enforced, never silently treated as something else;
- a ``publishRate`` may be ``adaptive`` (a throttlescope extension, ``limiter.adaptive``): the rate learns what
  the sink can take under ``publishThrottlingRateInMsg`` and over ``adaptiveFloorInMsg``; adaptive without a
  messages limit, or a floor above it, is refused with 412 (as Pulsar refuses a value a policy cannot take).
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from controlplane import policyset
from controlplane.context import Context, done, get_ctx
from controlplane.errors import ApiError
from controlplane.models import (
    TOPIC_DOMAINS,
    Applied,
    DispatchRateBody,
    EffectiveLimits,
    IsGlobal,
    Namespace,
    PublishRateBody,
    Subscription,
    Tenant,
    Topic,
)
from protocol import DispatchRate, PublishRate

router = APIRouter(prefix="/admin/v2")
Ctx = Annotated[Context, Depends(get_ctx)]
CHANGED = {204: {"description": "Changed; the new policy version is in the X-Policy-Version header"}}
UNSET = {204: {"description": "Not set at this level (Pulsar's client reads null)"}}
RELATIVE = ("relativeToPublishRate must be false (or omitted): throttlescope's dispatch rates are absolute. "
            "Pulsar's relative rate (the topic's current publish rate plus the configured one) is not enforced by "
            "the participants, so it is refused rather than applied as something else; send the rate itself")
MEANING = {
    ("tenant", "publishRate"): "aggregate publish limit over every topic of the tenant (throttlescope extension)",
    ("tenant", "dispatchRate"): "aggregate dispatch limit over every topic of the tenant (throttlescope extension)",
    ("namespace", "publishRate"): "publish limit applied to each topic of the namespace (Pulsar's meaning)",
    ("namespace", "dispatchRate"): "dispatch limit applied to each topic of the namespace",
    ("namespace", "subscriptionDispatchRate"): "dispatch limit applied to each subscription in the namespace",
    ("topic", "publishRate"): "publish limit of this topic (overrides the namespace's)",
    ("topic", "dispatchRate"): "dispatch limit of this topic (overrides the namespace's)",
    ("topic", "subscriptionDispatchRate"): "dispatch limit of each subscription of this topic",
    ("subscription", "dispatchRate"): "dispatch limit of this subscription (overrides the topic's and the "
                                      "namespace's subscriptionDispatchRate)",
}
TOPIC = "/{domain}/{tenant}/{namespace}/{topic}"


def _tenant_target(tenant: Tenant) -> str:
    return tenant


def _namespace_target(tenant: Tenant, namespace: Namespace) -> str:
    return f"{tenant}/{namespace}"


def _topic_target(tenant: Tenant, namespace: Namespace, topic: Topic) -> str:
    return f"{tenant}/{namespace}/{topic}"


def _subscription_target(tenant: Tenant, namespace: Namespace, topic: Topic, subscription: Subscription) -> str:
    return f"{tenant}/{namespace}/{topic}/{subscription}"


def _topic_reads(applied: Applied = False, isGlobal: IsGlobal = False) -> bool:
    return applied


def _topic_writes(isGlobal: IsGlobal = False) -> None:
    return None


def _level_reads() -> bool:
    return False


def _level_writes() -> None:
    return None


SCOPES: dict[str, tuple[list[str], Callable[..., str], tuple[str, ...]]] = {
    "tenant": (["/tenants/{tenant}"], _tenant_target, policyset.TENANT_POLICIES),
    "namespace": (["/namespaces/{tenant}/{namespace}"], _namespace_target, policyset.POLICIES),
    "topic": ([TOPIC.replace("{domain}", d) for d in TOPIC_DOMAINS], _topic_target, policyset.POLICIES),
    "subscription": ([TOPIC.replace("{domain}", d) + "/{subscription}" for d in TOPIC_DOMAINS],
                     _subscription_target, ("dispatchRate",)),
}


def _applied(scope: str, policy: str, target: str, ctx: Context) -> PublishRate | DispatchRate:
    """``applied=true``: the value a topic (or, for a subscription, that subscription) is held to."""
    if scope == "subscription":
        topic, subscription = target.rsplit("/", 1)
        return policyset.applied(ctx.policies(), "subscriptionDispatchRate", topic, subscription)
    return policyset.applied(ctx.policies(), policy, target)


def _register(scope: str, policy: str) -> None:
    prefixes, target_of, _ = SCOPES[scope]
    kind = policyset.policy_kind(scope, policy)
    out_model = PublishRate if policy == "publishRate" else DispatchRate
    body_model = PublishRateBody if policy == "publishRate" else DispatchRateBody
    topical = scope in ("topic", "subscription")
    Target = Annotated[str, Depends(target_of)]
    Reads = Annotated[bool, Depends(_topic_reads if topical else _level_reads)]
    Writes = Annotated[None, Depends(_topic_writes if topical else _level_writes)]
    meaning = MEANING[(scope, policy)]
    tags = ["topics" if topical else f"{scope}s"]

    def get_policy(target: Target, applied: Reads, ctx: Ctx) -> Any:
        if applied:
            return _applied(scope, policy, target, ctx)
        value = ctx.store.get(kind, target)
        return Response(status_code=204) if value is None else value

    def set_policy(target: Target, body: body_model, request: Request, ctx: Ctx,  # type: ignore[valid-type]
                   _: Writes) -> Response:
        if getattr(body, "relativeToPublishRate", False):
            raise ApiError(400, RELATIVE)
        problem = body.adaptive_error() if isinstance(body, PublishRate) else None
        if problem is not None:   # (Pulsar answers a value a policy cannot take with 412)
            raise ApiError(412, problem)
        return done(ctx.change(request, kind, target, body.known()), ignored=body.ignored())

    def remove_policy(target: Target, request: Request, ctx: Ctx, _: Writes) -> Response:
        return done(ctx.change(request, kind, target, None))

    for fn, verb in ((get_policy, "get"), (set_policy, "set"), (remove_policy, "remove")):
        fn.__name__ = f"{verb}_{scope}_{policy}"
    for prefix in prefixes:
        path = f"{prefix}/{policy}"
        router.get(path, response_model=out_model, tags=tags, summary=f"Get the {scope} {policy}",
                   description=meaning, responses=UNSET)(get_policy)
        for method in (router.post, router.put):
            method(path, status_code=204, tags=tags, summary=f"Set the {scope} {policy}", description=meaning,
                   responses={400: {"description": "relativeToPublishRate true (not supported)"},
                              412: {"description": "adaptive settings that cannot hold (see the body's reason)"},
                              **CHANGED}
                   )(set_policy)
        router.delete(path, status_code=204, tags=tags, summary=f"Remove the {scope} {policy}",
                      description=meaning + "; succeeds when it is not set", responses=CHANGED)(remove_policy)


for _scope, (_, _, _policies) in SCOPES.items():
    for _policy in _policies:
        _register(_scope, _policy)

SubscriptionParam = Annotated[str | None, Query(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f/]+$",
                                                description="A subscription of the topic")]


def effective_limits(tenant: Tenant, namespace: Namespace, topic: Topic, ctx: Ctx,
                     subscription: SubscriptionParam = None) -> EffectiveLimits:
    return policyset.effective_limits(ctx.policies(), tenant, namespace, topic, subscription)


for _prefix in SCOPES["topic"][0]:
    router.get(f"{_prefix}/effectiveLimits", response_model=EffectiveLimits, tags=["topics"],
               summary="The limits that apply to a topic (or subscription), and where each comes from",
               description="Per-topic and per-subscription limits resolve subscription policy (for the "
                           "subscription dispatch rate) > topic policy > namespace policy > broker default; "
                           "aggregates (the resource group of the topic, else of its namespace, else of its tenant; "
                           "tenant aggregate limits) and broker-level limits apply on top (logical AND).")(effective_limits)
